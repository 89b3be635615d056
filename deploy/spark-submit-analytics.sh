#!/usr/bin/env bash
# Run the analytics jobs (`python -m analytics run ...`) on a Spark cluster through spark-submit.
#
# Usage:
#   deploy/spark-submit-analytics.sh [SPARK-SUBMIT OPTIONS...] -- run --logs DIR --out DIR
#                                    [--since ISO] [--until ISO] [--incremental] [--top N]
#   deploy/spark-submit-analytics.sh --help
#
# The first `--` splits the command line:
#   before it  spark-submit's own options, passed on as they are: --master URL (else
#              spark-submit's default, from spark-defaults.conf or local[*]), memory,
#              --conf ...; the job's session runs on the master spark-submit chose.
#              Not accepted: a primary resource, --class, --kill, --status, --remote, and a
#              deploy mode other than client. --py-files are shipped along with the package.
#   after it   the job's arguments exactly as for `python -m analytics` (see
#              `analytics/__main__.py` or `... -- run --help`), except --master.
# Example:
#   deploy/spark-submit-analytics.sh --master spark://head:7077 --executor-memory 4g \
#       --conf spark.log.level=WARN \
#       -- run --logs /mnt/cluster/eventq/logs --out /mnt/cluster/eventq/analytics --incremental
#
# What it does:
# - spark-submit: $SPARK_HOME/bin/spark-submit when SPARK_HOME is set, else the first on PATH,
#   else the one in this repository's .venv (pip's pyspark).
# - Pythons (3.11 or later, both of the same minor version, as PySpark requires):
#   driver = PYSPARK_DRIVER_PYTHON, else this repository's .venv/bin/python, else
#   PYSPARK_PYTHON, else the newest python3.1x/python3 on PATH; it needs matplotlib (and
#   pyspark, unless SPARK_HOME's python/lib provides it).
#   executors = a --conf spark.pyspark.python=..., else PYSPARK_PYTHON, else the Spark
#   configuration's spark.pyspark.python (spark-defaults.conf), else the driver's. Set one
#   when the executors' hosts have their Python at another path; a PYSPARK_PYTHON not found
#   on this host is assumed to exist on theirs.
# - Zips the `analytics` package the driver's Python imports (only it: it imports nothing else
#   of ours; an installed eventq's, or this checkout's through .venv) into a temporary
#   directory, checks the job's arguments with the package's own parser and that --logs holds
#   a delivery log and --out can be written, then submits in client deploy mode a driver that
#   runs `python -m analytics` with the zip on --py-files, so that executors on other hosts
#   can import the package. The temporary directory is removed on exit; INT, TERM and HUP
#   are passed on to spark-submit as TERM.
# - Client mode: the driver runs here, so the console summary is printed here and the exit
#   status is the job's: 0 done, 1 nothing to read or a problem found before submitting,
#   2 wrong arguments; anything else is spark-submit's own failure.
#
# --logs: the driver lists it and the executors read its files by path, so it must be on a
# filesystem mounted at the same path on this host and on every executor host (NFS or the
# like); the job hands Spark file:// URIs, whatever the cluster's default filesystem.
# --out: only the driver writes there (every table, with pyarrow; executors write nothing),
# so it must be writable here and need not be shared. docs/analytics.md, "Running on a
# cluster", says what else the executors must reach. The driver's memory is spark-submit's
# --driver-memory (the embedded run's 4g does not apply).
set -euo pipefail

PROG="spark-submit-analytics"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
readonly REPO

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage() {
    cat <<EOF
usage: $0 [SPARK-SUBMIT OPTIONS, e.g. --master URL] -- run --logs DIR --out DIR
           [--since ISO] [--until ISO] [--incremental] [--top N]
Runs \`python -m analytics\` through spark-submit; see the comment at the top of this file.
EOF
}
die_usage() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    usage >&2
    exit 2
}

# --- the command line ----------------------------------------------------------------------

if (($# == 0)); then
    die_usage "no arguments"
fi

submit_opts=()  # spark-submit options passed on
user_py_files=""
separated=""

# One spark-submit option `name` with `value` (given as `name value` or `name=value`).
take_option() {
    local name=$1 value=$2
    case $name in
        --py-files)
            user_py_files=$value
            return
            ;;
        --deploy-mode)
            [[ $value == client ]] || die_usage "--deploy-mode $value: only client mode gives" \
                "the job's console summary and exit status here (and standalone clusters run" \
                "Python drivers in client mode only)"
            ;;
        --conf | -c)
            case $value in
                spark.submit.deployMode=*)
                    [[ ${value#*=} == client ]] || die_usage "--conf $value: only client" \
                        "deploy mode is supported (see --deploy-mode)"
                    ;;
                spark.submit.pyFiles=*) die_usage "--conf $value: use --py-files" ;;
            esac
            ;;
        --class | --kill | --status | --remote)
            die_usage "$name is not for this wrapper (it submits the analytics job itself," \
                "on a classic Spark session)"
            ;;
    esac
    submit_opts+=("$name" "$value")
}

while (($# > 0)); do
    arg=$1
    shift
    case $arg in
        --)
            separated=1
            break
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        --supervise | --usage-error | --verbose | -v | --version | --load-spark-defaults)
            submit_opts+=("$arg")
            ;;
        --*=*) take_option "${arg%%=*}" "${arg#*=}" ;;
        -*)
            (($# > 0)) || die_usage "spark-submit option $arg needs a value"
            take_option "$arg" "$1"
            shift
            ;;
        *)
            die_usage "unexpected '$arg' among the spark-submit options; the job's arguments" \
                "go after --"
            ;;
    esac
done
run_args=("$@")

[[ -n $separated ]] || die_usage "no -- between the spark-submit options and the job's" \
    "arguments (e.g. --master URL -- run --logs DIR --out DIR)"
((${#run_args[@]} > 0)) || die_usage "nothing after --: give the job's arguments," \
    "e.g. -- run --logs DIR --out DIR"

# --- spark-submit and the Pythons ---------------------------------------------------------------

if [[ -n ${SPARK_HOME:-} ]]; then
    spark_submit="$SPARK_HOME/bin/spark-submit"
    [[ -x $spark_submit ]] || die "SPARK_HOME=$SPARK_HOME has no bin/spark-submit"
elif spark_submit="$(command -v spark-submit)"; then
    :
elif [[ -x $REPO/.venv/bin/spark-submit ]]; then
    spark_submit="$REPO/.venv/bin/spark-submit"
else
    die "spark-submit not found: set SPARK_HOME to a Spark installation, put spark-submit on" \
        "PATH, or install pyspark into $REPO/.venv (.venv/bin/pip install '.[analytics]')"
fi

# "3.12" for a Python that runs, nothing (and status 1) otherwise.
python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
# Whether a version printed by python_version is 3.11 or later.
recent_enough() { [[ $1 =~ ^3\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 11)); }

if [[ -n ${PYSPARK_DRIVER_PYTHON:-} ]]; then
    driver_python=$PYSPARK_DRIVER_PYTHON
elif [[ -x $REPO/.venv/bin/python ]]; then
    driver_python="$REPO/.venv/bin/python"
elif [[ -n ${PYSPARK_PYTHON:-} ]]; then
    driver_python=$PYSPARK_PYTHON
else
    driver_python=""
    for candidate in python3.14 python3.13 python3.12 python3.11 python3; do
        if version="$(python_version "$candidate")" && recent_enough "$version"; then
            driver_python=$candidate
            break
        fi
    done
    [[ -n $driver_python ]] || die "no Python 3.11 or later on PATH for the driver;" \
        "set PYSPARK_DRIVER_PYTHON (and PYSPARK_PYTHON for the executors)"
fi
driver_version="$(python_version "$driver_python")" ||
    die "the driver's Python '$driver_python' does not run (PYSPARK_DRIVER_PYTHON?)"
recent_enough "$driver_version" ||
    die "the driver's Python '$driver_python' is $driver_version; the jobs need 3.11 or later"

executor_python_given=${PYSPARK_PYTHON:+1}
executor_python=${PYSPARK_PYTHON:-$driver_python}
if command -v "$executor_python" >/dev/null; then
    executor_version="$(python_version "$executor_python")" ||
        die "the executors' Python '$executor_python' does not run (PYSPARK_PYTHON?)"
    recent_enough "$executor_version" || die "the executors' Python '$executor_python' is" \
        "$executor_version; the jobs need 3.11 or later"
    [[ $executor_version == "$driver_version" ]] || die "the executors' Python" \
        "'$executor_python' is $executor_version but the driver's '$driver_python' is" \
        "$driver_version; PySpark needs the same minor version (set PYSPARK_DRIVER_PYTHON)"
else
    say "PYSPARK_PYTHON=$executor_python is not on this host; the executors' hosts must have" \
        "it (Python $driver_version, as the driver)"
fi

# The package the driver's Python imports (an installed eventq, or this checkout's through
# the editable .venv): the executors get the very code the driver runs.
package_dir="$("$driver_python" -P -c \
    'import analytics, os; print(os.path.dirname(analytics.__file__))' 2>/dev/null)" ||
    die "the driver's Python '$driver_python' cannot import the analytics package;" \
        "install eventq with its analytics extra into it (pip install 'eventq[analytics]')"

# --- package, check, submit ---------------------------------------------------------------------

tmp="$(mktemp -d "${TMPDIR:-/tmp}/eventq-analytics.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT  # exit (running the EXIT trap) rather than die of the signal
trap 'exit 143' TERM
trap 'exit 129' HUP
zip="$tmp/analytics.zip"
driver="$tmp/eventq_analytics_driver.py"

# The package's files, without __pycache__ (stale or another Python's).
"$driver_python" -P - "$package_dir" "$zip" <<'PY'
import sys
import zipfile
from pathlib import Path

package, target = Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            archive.write(path, path.relative_to(package.parent).as_posix())
PY

# spark-submit's primary resource must be a .py file; this one is `python -m analytics`.
cat >"$driver" <<'PY'
"""`python -m analytics` for spark-submit (written by deploy/spark-submit-analytics.sh)."""

import runpy

runpy.run_module("analytics", run_name="__main__", alter_sys=True)
PY

# Check the job's arguments with the package's own parser, imported from the zip (so the
# zip is complete and the driver's Python has the package's dependencies), before paying for
# the JVM. Exits 2 with argparse's message on wrong arguments, 0 without writing $ready
# after --help, 1 on a --logs/--out problem.
spark_home="$(cd "$(dirname "$(readlink -f "$spark_submit")")/.." && pwd -P)"
check_path="$zip"
for lib in "$spark_home"/python/lib/pyspark.zip "$spark_home"/python/lib/py4j-*.zip; do
    if [[ -f $lib ]]; then
        check_path+=":$lib"
    fi
done
ready="$tmp/ready"
check=0
PYTHONPATH="$check_path${PYTHONPATH:+:$PYTHONPATH}" READY="$ready" WRAPPER="$PROG" \
    "$driver_python" -P - "${run_args[@]}" <<'PY' || check=$?
import os
import sys
from pathlib import Path


def fail(message: str, status: int = 1) -> None:
    print(f"{os.environ['WRAPPER']}: error: {message}", file=sys.stderr)
    sys.exit(status)


try:
    from analytics.__main__ import build_parser
    from analytics.extract import DELIVERIES
except ImportError as exc:
    fail(
        f"the driver's Python {sys.executable} cannot import the analytics package: {exc} "
        "(it needs pyspark and matplotlib: pip install '.[analytics]')"
    )
args = build_parser().parse_args(sys.argv[1:])
if args.master is not None:
    fail("--master goes among the spark-submit options, before --", 2)
logs, out = args.logs, args.out
if not logs.is_dir():
    fail(f"--logs {logs}: no such directory")
deliveries = logs / DELIVERIES
if not deliveries.is_dir():
    fail(
        f"--logs {logs}: no delivery log in it (expected "
        f"{deliveries}/date=YYYY-MM-DD/hour=HH/*.parquet; --logs is the shards' EVENTQ_LOG_DIR)"
    )
if not os.access(deliveries, os.R_OK | os.X_OK):
    fail(f"--logs {logs}: {deliveries} is not readable")
if out.exists() and not out.is_dir():
    fail(f"--out {out}: exists and is not a directory")
existing = next(p for p in [out, *out.absolute().parents] if p.exists())
if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
    fail(f"--out {out}: cannot write in {existing}")
Path(os.environ["READY"]).touch()
PY
if ((check != 0)); then
    exit "$check"
fi
if [[ ! -e $ready ]]; then
    exit 0  # help was asked for and printed
fi

# The driver's Python goes in a --conf, which outranks the Spark configuration's; the
# executors' only when PYSPARK_PYTHON chose it, the environment being outranked by a
# spark.pyspark.python of the cluster's configuration.
export PYSPARK_DRIVER_PYTHON="$driver_python" PYSPARK_PYTHON="$executor_python"
python_confs=(--conf "spark.pyspark.driver.python=$driver_python")
if [[ -n $executor_python_given ]]; then
    python_confs+=(--conf "spark.pyspark.python=$executor_python")
fi
submit=(
    "$spark_submit"
    --deploy-mode client
    "${python_confs[@]}"
    "${submit_opts[@]}"
    --py-files "$zip${user_py_files:+,$user_py_files}"
    "$driver" "${run_args[@]}"
)

# In the background so that a signal to this script reaches spark-submit and the trap
# above still removes the temporary directory.
"${submit[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM HUP
status=0
wait "$child" || status=$?
while kill -0 "$child" 2>/dev/null; do  # the wait was cut short by a signal
    status=0
    wait "$child" || status=$?
done
exit "$status"
