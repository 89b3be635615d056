#!/usr/bin/env bash
# Bootstrap a development/demo installation of eventq on Debian 12.
#
# A library: deploy/run.sh and deploy/test.sh source it and call `bootstrap`.
# Run directly (`bash deploy/bootstrap.sh`) it just bootstraps.
#
# Every step is idempotent and prints one line. Services that already accept
# connections on 127.0.0.1 (PostgreSQL :5432, RabbitMQ :5672) are used as they
# are; missing ones are installed from Debian and started. Generated settings go
# to <repo>/var/eventq.env, the virtual environment to <repo>/.venv.

EVENTQ_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
EVENTQ_VAR="$EVENTQ_REPO/var"
EVENTQ_ENV_FILE="$EVENTQ_VAR/eventq.env"
EVENTQ_VENV="$EVENTQ_REPO/.venv"

PG_HOST=127.0.0.1
PG_PORT=5432
AMQP_HOST=127.0.0.1
AMQP_PORT=5672
DB_NAME=eventq
DB_ROLE=eventq
DB_PASSWORD=""   # set by load_password
ADMIN_PSQL=()    # set by find_admin_psql
APT_UPDATED=""

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when root, else through sudo.
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "need root or sudo to run: $*"
    fi
}

systemd_is_init() { [[ "$(cat /proc/1/comm 2>/dev/null)" == systemd ]]; }

apt_install() {
    command -v apt-get >/dev/null || die "cannot install $* (no apt-get); install it yourself"
    # Package lists are missing on fresh images and stale after a while.
    if [[ -z $APT_UPDATED && -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null)" ]]; then
        say "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
        >/dev/null || die "apt-get install $* failed"
}

# True when something accepts TCP connections on host:port (bash's /dev/tcp).
# shellcheck disable=SC2016  # $1 and $2 expand in the inner bash
port_open() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

wait_for_port() {  # name host port seconds
    local deadline=$((SECONDS + $4))
    until port_open "$2" "$3"; do
        ((SECONDS < deadline)) || die "$1 does not accept connections on $2:$3 after $4 s"
        sleep 1
    done
}

# --- settings ---------------------------------------------------------------

# The database password: the one already in var/eventq.env, else a new one.
load_password() {
    if [[ -f $EVENTQ_ENV_FILE ]]; then
        # Only plain URL-safe passwords (the generated ones are hex).
        DB_PASSWORD="$(sed -n "s|^EVENTQ_DATABASE_URL=postgresql://$DB_ROLE:\([A-Za-z0-9._~-]\{1,\}\)@.*|\1|p" \
            "$EVENTQ_ENV_FILE" | head -n 1)"
    fi
    if [[ -z $DB_PASSWORD ]]; then
        DB_PASSWORD="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
    fi
}

# Write var/eventq.env: keep the lines already there (a user may edit them),
# add any missing variable with its default.
write_env() {
    mkdir -p "$EVENTQ_VAR/state" "$EVENTQ_VAR/log"
    local -a defaults=(
        "EVENTQ_DATABASE_URL=postgresql://$DB_ROLE:$DB_PASSWORD@$PG_HOST:$PG_PORT/$DB_NAME"
        "EVENTQ_AMQP_URL=amqp://guest:guest@$AMQP_HOST:$AMQP_PORT/%2F"
        "EVENTQ_STATE_DIR=$EVENTQ_VAR/state"
        "EVENTQ_LOG_DIR=$EVENTQ_VAR/log"
    )
    local line added=0
    (umask 077 && touch "$EVENTQ_ENV_FILE")
    chmod 600 "$EVENTQ_ENV_FILE"
    for line in "${defaults[@]}"; do
        if ! grep -q "^${line%%=*}=" "$EVENTQ_ENV_FILE"; then
            printf '%s\n' "$line" >>"$EVENTQ_ENV_FILE"
            added=$((added + 1))
        fi
    done
    if ((added)); then
        say "settings: wrote $added default(s) to ${EVENTQ_ENV_FILE#"$EVENTQ_REPO"/}"
    else
        say "settings: ${EVENTQ_ENV_FILE#"$EVENTQ_REPO"/} up to date"
    fi
}

# Export the file's variables, except those the caller already set.
export_env() {
    local key value
    while IFS='=' read -r key value; do
        [[ $key =~ ^[A-Z_][A-Z0-9_]*$ ]] || continue
        if [[ -z ${!key:-} ]]; then
            export "$key=$value"
        fi
    done <"$EVENTQ_ENV_FILE"
}

# --- PostgreSQL -------------------------------------------------------------

pg_cluster_version() {  # newest version with a "main" cluster under /etc/postgresql
    local v
    # shellcheck disable=SC2012  # version directories: plain numbers
    v="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)" || true
    [[ -n $v && -d /etc/postgresql/$v/main ]] && printf '%s\n' "$v"
}

pg_start_cluster() {  # version
    if systemd_is_init; then
        as_root systemctl start "postgresql@$1-main" || true
    else
        as_root pg_ctlcluster --skip-systemctl-redirect "$1" main start || true
    fi
}

ensure_postgres() {
    if port_open "$PG_HOST" "$PG_PORT"; then
        say "postgres: running on $PG_HOST:$PG_PORT"
    else
        local version
        version="$(pg_cluster_version)" || true
        if [[ -z $version ]]; then
            apt_install postgresql
            version="$(pg_cluster_version)" ||
                die "postgres: installed, but no cluster under /etc/postgresql (create one with pg_createcluster)"
        fi
        say "postgres: starting cluster $version/main"
        pg_start_cluster "$version"
        wait_for_port PostgreSQL "$PG_HOST" "$PG_PORT" 60
    fi
    command -v psql >/dev/null || apt_install postgresql-client
}

# Pick a way to run psql as a database superuser.
find_admin_psql() {
    local -a base=(psql -X -q -At -v ON_ERROR_STOP=1 -d postgres)
    if PGCONNECT_TIMEOUT=5 "${base[@]}" -w -h "$PG_HOST" -p "$PG_PORT" -U postgres \
        -c 'SELECT 1' </dev/null >/dev/null 2>&1; then
        ADMIN_PSQL=(env PGCONNECT_TIMEOUT=5 "${base[@]}" -w -h "$PG_HOST" -p "$PG_PORT" -U postgres)
    elif [[ $EUID -eq 0 ]] && command -v runuser >/dev/null && id postgres >/dev/null 2>&1; then
        ADMIN_PSQL=(runuser -u postgres -- "${base[@]}" -p "$PG_PORT")
    elif command -v sudo >/dev/null; then
        ADMIN_PSQL=(sudo -u postgres "${base[@]}" -p "$PG_PORT")
    else
        die "postgres: cannot connect as superuser 'postgres' (not trusted on $PG_HOST, not root, no sudo)"
    fi
}

# SQL on stdin; from / so that psql as user postgres can read its cwd.
admin_psql() { (cd / && "${ADMIN_PSQL[@]}"); }

ensure_database() {
    find_admin_psql
    local created
    # The password travels on stdin (not argv); \gexec runs each generated statement.
    created="$(admin_psql <<SQL
\\set pw '$DB_PASSWORD'
SELECT 'role' FROM pg_roles WHERE rolname = '$DB_ROLE' HAVING count(*) = 0;
SELECT format('CREATE ROLE %I LOGIN CREATEDB PASSWORD %L', '$DB_ROLE', :'pw')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$DB_ROLE') \\gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', '$DB_ROLE', :'pw') \\gexec
SELECT 'database' FROM pg_database WHERE datname = '$DB_NAME' HAVING count(*) = 0;
SELECT format('CREATE DATABASE %I OWNER %I', '$DB_NAME', '$DB_ROLE')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB_NAME') \\gexec
SELECT 'owner:' || pg_get_userbyid(datdba) FROM pg_database WHERE datname = '$DB_NAME';
SQL
)" || die "postgres: could not create role/database $DB_NAME (see the psql error above)"
    local made owner
    made="$(grep -E '^(role|database)$' <<<"$created" | paste -sd ' ' -)" || true
    owner="$(sed -n 's/^owner://p' <<<"$created")"
    if [[ -n $owner && $owner != "$DB_ROLE" ]]; then
        say "postgres: warning: database $DB_NAME is owned by $owner, not $DB_ROLE; migrations may fail"
    fi
    if [[ -n $made ]]; then
        say "postgres: created ${made// / and } $DB_NAME"
    else
        say "postgres: role and database $DB_NAME ready"
    fi
}

# --- RabbitMQ ---------------------------------------------------------------

rabbitmq_installed() { command -v rabbitmq-server >/dev/null || [[ -x /usr/sbin/rabbitmq-server ]]; }

rabbitmq_start() {
    if systemd_is_init; then
        as_root systemctl start rabbitmq-server || true
    else
        local server=/usr/sbin/rabbitmq-server
        [[ -x $server ]] || server=rabbitmq-server
        as_root "$server" -detached >>"$EVENTQ_VAR/log/rabbitmq-start.log" 2>&1 || true
    fi
}

ensure_rabbitmq() {
    if port_open "$AMQP_HOST" "$AMQP_PORT"; then
        say "rabbitmq: running on $AMQP_HOST:$AMQP_PORT"
        return
    fi
    if ! rabbitmq_installed; then
        apt_install rabbitmq-server
        # With systemd the package starts the service itself.
        if port_open "$AMQP_HOST" "$AMQP_PORT"; then
            say "rabbitmq: installed and running"
            return
        fi
    fi
    say "rabbitmq: starting (this can take ~20 s)"
    rabbitmq_start
    wait_for_port RabbitMQ "$AMQP_HOST" "$AMQP_PORT" 90
}

# --- nginx (the sharding tests put a real one in front of two shards) -------

ensure_nginx() {
    if command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]]; then
        say "nginx: installed ($(/usr/sbin/nginx -v 2>&1 | sed 's/^nginx version: //'))"
        return
    fi
    # Only the binary is wanted: the tests start their own nginx on loopback
    # ports. A policy-rc.d of 101 keeps the package from starting the distro's
    # site on port 80 on a machine without systemd.
    local policy=/usr/sbin/policy-rc.d added=""
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 755 "$policy"
        added=1
    fi
    apt_install nginx-light || apt_install nginx
    [[ -n $added ]] && as_root rm -f "$policy"
    command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || die "nginx: not installed"
}

# --- nchan (tests/benchmarks/fanout.py measures nginx + nchan beside eventq) --

ensure_nchan() {  # after ensure_nginx
    local module
    for module in /usr/lib/nginx/modules/ngx_nchan_module.so \
        /usr/share/nginx/modules/ngx_nchan_module.so; do
        if [[ -f $module ]]; then
            say "nchan: installed ($module)"
            return
        fi
    done
    # The module only: the benchmark writes its own nginx config that loads
    # it, so the distro's site (if nginx was installed with one) is not used.
    apt_install libnginx-mod-nchan
    [[ -f /usr/lib/nginx/modules/ngx_nchan_module.so ]] || die "nchan: not installed"
}

# --- systemd-analyze (the tests verify the units in deploy/systemd) ----------

ensure_systemd_analyze() {
    if command -v systemd-analyze >/dev/null; then
        say "systemd-analyze: installed"
        return
    fi
    # The package only: nothing is started on a machine whose init is not systemd.
    apt_install systemd
    command -v systemd-analyze >/dev/null || die "systemd-analyze: not installed"
}

# --- the browser tests: Chromium, its driver and Node -----------------------

java_ok() {  # PySpark 4.3 supports Java 17 and 21, not newer ones
    local version
    version="$("$1" -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -n 1)"
    [[ $version == 17 || $version == 21 ]]
}

ensure_java() {  # the analytics jobs (Spark): `eventq analytics run` and their tests
    local java
    java="$(command -v java || true)"
    if [[ -n $java ]] && java_ok "$java"; then
        say "java: installed ($("$java" -version 2>&1 | head -n 1))"
        return
    fi
    # None, or one Spark does not run on: Debian 12's Java 17 beside it.
    java="$(ls /usr/lib/jvm/java-17-openjdk-*/bin/java 2>/dev/null | head -n 1)"
    if [[ -z $java ]]; then
        apt_install openjdk-17-jre-headless
        java="$(ls /usr/lib/jvm/java-17-openjdk-*/bin/java 2>/dev/null | head -n 1)"
        [[ -n $java ]] || die "java: openjdk-17-jre-headless gave no java"
    fi
    export JAVA_HOME="${java%/bin/java}"
    say "java: $JAVA_HOME (JAVA_HOME)"
}

ensure_chromium() {
    local browser driver
    browser="$(command -v chromium || true)"
    driver="$(command -v chromedriver || true)"
    if [[ -n $browser && -n $driver ]]; then
        say "chromium: installed ($("$browser" --version 2>/dev/null | head -1))"
        return
    fi
    # Debian's headless-capable browser and the WebDriver of the same version.
    apt_install chromium chromium-driver
    command -v chromium >/dev/null && command -v chromedriver >/dev/null ||
        die "chromium: chromium and chromium-driver not installed"
}

ensure_node() {  # eventq.js's unit tests run with Node's test runner
    # 18: Debian 12's nodejs (18.20) and eventq-client's package.json
    # "engines"; the tests pass on it and on 20.20.
    local minimum=18
    local new_enough="process.exit(parseInt(process.versions.node, 10) < $minimum ? 1 : 0)"
    if command -v node >/dev/null && node -e "$new_enough"; then
        say "node: installed ($(node --version))"
        return
    fi
    apt_install nodejs
    command -v node >/dev/null || die "node: not installed"
    node -e "$new_enough" ||
        die "node: $(node --version) is older than $minimum; install a nodejs package of version $minimum or later (Debian 12's nodejs is one)"
    say "node: installed ($(node --version))"
}

# eventq.js's types are checked, and eventq.d.ts generated, by TypeScript's
# tsc (tests/js): the version eventq-client's package-lock.json pins, in its
# node_modules (gitignored). After ensure_node. Without the registry it only
# warns: the rest of the suite can run, and the type tests say what is missing.
ensure_client_typescript() {
    local client="$EVENTQ_REPO/server/static/eventq-client" want have
    # shellcheck disable=SC2016  # node's expressions, not the shell's
    want="$(node -p 'require(process.argv[1]).packages["node_modules/typescript"].version' \
        "$client/package-lock.json")" || die "typescript: cannot read $client/package-lock.json"
    # shellcheck disable=SC2016
    have="$(node -p 'require(process.argv[1]).version' \
        "$client/node_modules/typescript/package.json" 2>/dev/null)" || have=""
    if [[ $have == "$want" ]]; then
        say "typescript: installed ($have, server/static/eventq-client/node_modules)"
        return
    fi
    command -v npm >/dev/null || apt_install npm  # Debian's nodejs comes without it
    command -v npm >/dev/null || die "npm: not installed"
    say "typescript: npm ci in server/static/eventq-client ($want)"
    if ! npm ci --prefix "$client" --no-audit --no-fund --fetch-retries=1 >/dev/null; then
        say "typescript: warning: npm ci failed (is the npm registry reachable?);" \
            "the type tests of tests/js fail until \`npm ci --prefix server/static/eventq-client\` succeeds"
    fi
}

# --- Python -----------------------------------------------------------------

# Zulip's own clients, unchanged, for the tests that run them against eventq
# (tests/clients): the terminal client zulip-term 0.7.0 (it declares
# Python < 3.11 but runs on 3.11: --ignore-requires-python; pygments before
# 2.16, whose styles its themes cannot read) and the bot framework (which
# imports importlib_metadata without declaring it), in a virtualenv of their
# own (their pins are not eventq's).
ZULIP_CLIENTS_PINS=(zulip-term==0.7.0 'pygments~=2.15.1' zulip-bots==0.9.0 importlib-metadata==10.2.0)
ensure_zulip_clients() {
    local venv="$EVENTQ_VAR/zulip-clients" stamp want py
    stamp="$venv/.installed"
    want="${ZULIP_CLIENTS_PINS[*]}"
    if [[ -x $venv/bin/zulip-term && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
        say "zulip clients: installed ($want)"
        return
    fi
    py="$(find_python)" || die "zulip clients: need python3 >= 3.11 with the venv module"
    "$py" -m venv --clear "$venv" || die "zulip clients: could not create $venv"
    "$venv/bin/python" -m pip install -q --ignore-requires-python "${ZULIP_CLIENTS_PINS[@]}" ||
        die "zulip clients: pip install ${want} failed"
    printf '%s' "$want" >"$stamp"
    say "zulip clients: installed ($want)"
}

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

find_python() {  # prints a python >= 3.11 that can create venvs
    local py
    for py in python3.13 python3.12 python3.11 python3; do
        if command -v "$py" >/dev/null && python_ok "$py" \
            && "$py" -c 'import venv, ensurepip' 2>/dev/null; then
            command -v "$py"
            return
        fi
    done
    return 1
}

# What setup.py compiles the delivery path with (mypyc's C, docs/architecture.md
# "Compiled modules"): without them the package installs as Python, slower.
ensure_compiler() {
    local py="$1" include
    command -v gcc >/dev/null || (apt_install gcc libc6-dev) ||
        say "gcc: not installed; the package installs as Python"
    include="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    [[ -f $include/Python.h ]] || (apt_install python3-dev) ||
        say "python3-dev: not installed; the package installs as Python"
}

# Whether the modules setup.py compiled differ from their source now
# (queues/compiled.py): the build is run again.
compiled_stale() {
    (cd "$EVENTQ_REPO" && "$EVENTQ_VENV/bin/python" -c \
        'import sys, queues.compiled as c; sys.exit(0 if c.stale_modules() else 1)' 2>/dev/null)
}

ensure_venv() {
    local stamp="$EVENTQ_VAR/.installed" py
    if ! python_ok "$EVENTQ_VENV/bin/python"; then
        if ! py="$(find_python)"; then
            # Debian ships venv/ensurepip separately from python3.
            apt_install python3 python3-venv
            py="$(find_python)" || die "python: need python3 >= 3.11 with the venv module"
        fi
        say "python: creating .venv with $py"
        "$py" -m venv --clear "$EVENTQ_VENV" || die "python: could not create $EVENTQ_VENV"
        rm -f "$stamp"
    fi
    if [[ ! -f $stamp || $EVENTQ_REPO/pyproject.toml -nt $stamp || $EVENTQ_REPO/setup.py -nt $stamp ||
        ! -x $EVENTQ_VENV/bin/eventq ]] || compiled_stale; then
        ensure_compiler "$EVENTQ_VENV/bin/python"
        say "python: pip install -e '.[test]' into .venv (the delivery path compiled: about a minute)"
        (cd "$EVENTQ_REPO" && "$EVENTQ_VENV/bin/python" -m pip install -q -e '.[test]') ||
            die "python: pip install failed"
        touch "$stamp"
    else
        say "python: .venv up to date ($("$EVENTQ_VENV/bin/python" -V 2>&1))"
    fi
}

# --- all of it --------------------------------------------------------------

bootstrap() {
    mkdir -p "$EVENTQ_VAR"
    # One bootstrap at a time (run.sh and test.sh may start together); the lock
    # is released before the caller execs, so the server does not inherit it.
    local lock_fd
    exec {lock_fd}>"$EVENTQ_VAR/.bootstrap.lock"
    flock "$lock_fd"
    load_password
    write_env
    ensure_postgres
    ensure_database
    ensure_rabbitmq
    ensure_venv
    ensure_java
    export_env
    exec {lock_fd}>&-
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    bootstrap
    say "done; settings in ${EVENTQ_ENV_FILE#"$EVENTQ_REPO"/}"
fi
