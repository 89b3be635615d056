"""What this server tells clients about itself.

eventq speaks the events API of the Zulip server version below; clients decide
which parameters and event shapes to use from `zulip_feature_level`.
"""

from __future__ import annotations

EVENTQ_VERSION = "0.1.0"
# Zulip 11's events API (reference: zerver/lib/events.py, late 2025). The
# suffix keeps the string parseable as a Zulip version by clients.
ZULIP_VERSION = f"11.0-eventq-{EVENTQ_VERSION}"
ZULIP_MERGE_BASE = ZULIP_VERSION
ZULIP_FEATURE_LEVEL = 419
