"""Actions: one async function per change to the domain, each writing in one
transaction and sending its events after commit to exactly the users who
must see them (see `generation.actions.base`)."""
