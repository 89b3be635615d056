"""What outlives a process: queue checkpoints and the journal, stream floors, and
`resume_from`."""
