"""The eventq server: a Tornado process holding per-client event queues behind
a Zulip-compatible long-poll API, plus the `eventq` command line."""
