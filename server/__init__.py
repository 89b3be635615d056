"""The eventq server: a Tornado process holding per-client event queues behind
a Zulip-compatible long-poll API, plus the `eventq` command line."""

# Before any compiled module is imported: the guard of compiled modules
# (queues/compiled.py), which importing `queues` runs.
import queues.compiled  # noqa: F401
