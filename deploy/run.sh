#!/usr/bin/env bash
# Run eventq in the foreground with a demo realm (the README's run command).
# Bootstraps what is missing, applies the schema, issues fresh API keys for the
# demo users, prints them with ready-to-paste examples, then serves until Ctrl-C.
set -euo pipefail

# shellcheck source=deploy/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
bootstrap
cd "$EVENTQ_REPO"

port="${EVENTQ_PORT:-9800}"
site="http://127.0.0.1:$port"
if port_open 127.0.0.1 "$port"; then
    die "port $port is already in use; pick another one: EVENTQ_PORT=9801 $0"
fi

.venv/bin/eventq db migrate >/dev/null
demo_json="$(.venv/bin/eventq demo --site "$site")"

# The keys go to the banner through the environment, not the command line.
DEMO_JSON="$demo_json" .venv/bin/python - <<'PY'
import json
import os

demo = json.loads(os.environ["DEMO_JSON"])
site, users = demo["site"], demo["users"]
example = next((u for u in users if u["role"] == "member"), users[0])
rule = "=" * 78
print(rule)
print(f"eventq: serving on {site}  (Ctrl-C stops it; queues are saved)")
print(f"\nDemo realm {demo['realm']!r}: fresh API keys, issued for this run")
width = max(len(u["email"]) for u in users)
for u in users:
    print(f"  {u['email']:<{width}}  {u['role']:<13}  {u['api_key']}")
email, key = example["email"], example["api_key"]
print("\nTry it:")
print(f"  curl -s -u {email}:{key} -X POST {site}/api/v1/register \\")
print("       -d 'event_types=[\"test\"]'")
print(f"\n  import zulip; client = zulip.Client(email={email!r}, api_key={key!r}, site={site!r})")
print(f"\nIn a browser: {site}/demo (log in as any demo user; a second tab as another)")
print(f"  and {site}/operator (what the server holds, live)")
print("\nSettings: var/eventq.env    Python with zulip installed: .venv/bin/python")
print(rule, flush=True)
PY

# The demo page and its password-less login exist only with the demo realm.
EVENTQ_DEMO=1 exec .venv/bin/eventq serve --port "$port"
