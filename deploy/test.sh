#!/usr/bin/env bash
# Run the test suite against the real PostgreSQL (the README's test command).
# Bootstraps what is missing; arguments go to pytest.
set -euo pipefail

# shellcheck source=deploy/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
bootstrap
ensure_nginx
ensure_nchan
ensure_systemd_analyze
ensure_chromium
ensure_node
ensure_client_typescript
ensure_zulip_clients
cd "$EVENTQ_REPO"
exec .venv/bin/pytest "$@"
