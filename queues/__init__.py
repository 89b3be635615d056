"""The pure delivery state of eventq: event queues, client descriptors, the
registry by queue, user and realm, filters, collapsing, expiry and snapshots.

Standard library only; time is a parameter and wake-ups are injected callbacks.
"""

# Before any compiled module is imported: stale compiled modules run from their
# source (queues/compiled.py).
from queues import compiled as _compiled

_compiled.install()
