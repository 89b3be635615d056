"""Notifications for users who are away (docs/notifications.md): who is away,
decided by the server that holds their queues (away.py), and the worker that
batches, emails and calls the webhook (worker.py)."""
