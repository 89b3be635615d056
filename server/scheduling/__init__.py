"""The scheduler: due scheduled messages sent by the server (scheduler.py)."""
