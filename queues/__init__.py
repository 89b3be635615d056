"""The pure delivery state of eventq: event queues, client descriptors, the
registry by queue, user and realm, filters, collapsing, expiry and snapshots.

Standard library only; time is a parameter and wake-ups are injected callbacks.
"""
