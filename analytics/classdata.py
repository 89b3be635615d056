"""The class-data archive of the embedded driver's JVM (Java's application
class-data sharing): the classes of Spark that an earlier run's JVM loaded
and verified, mapped from one file by the next JVM instead of read from
Spark's jars and verified again.

An embedded run's JVM loads some 20,000 classes before its first query
returns; on the 2-core machine (2026-11-28), mapping them from the archive
took the session start from 9.7-10.2 s to 3.6-4.6 s and an hour's first
query from 10.5-11 s to 6.7-7 s.

Where (`find`): `$XDG_CACHE_HOME/eventq/analytics` (`~/.cache/...` when
unset), else, where that cannot be written (the hourly unit's DynamicUser
has no home), `<out>/.cache`. One archive per Java runtime and Spark
install (`install_key`: their paths, and the sizes and times of the JVM's
library and of Spark's jars), so an upgrade of either makes a new archive
instead of offering the JVM one it would refuse.

A run without an archive makes one: its JVM records its classes (about a
third slower) and writes them when it exits, to a staging file of the run's
own; the run waits for that (20 s on the 2-core machine), has a JVM map the
file with -Xshare:on (which fails, where -Xshare:auto would fall back, on a
file it cannot use: one cut short even crashes it) and only then renames it
into place. So an archive under its name is whole; a JVM that still cannot
start with it (the file damaged since) makes the session start again
without it and the archive go (session.py). Nothing here fails a run: with
no writable directory, or a path Spark's option parsing would split, a run
has no archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "spark-"
SUFFIX = ".jsa"
# A staging file older than this is a crashed run's: a dump takes under a minute.
STALE_STAGING_SECS = 3600
# Archives of other installs (an upgrade's predecessor) not used for this long go.
UNUSED_ARCHIVE_SECS = 7 * 86400
# The checking JVM maps the archive and exits: a second on the 2-core machine.
CHECK_TIMEOUT_SECS = 120
# The JVM's own warnings (an archive it will not use, say) go to stderr, as
# everything else the JVM says: stdout is the run's summary. A dumping JVM's
# cds warnings are hundreds of classes it leaves out (signed jars, old class
# file versions): not news.
LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
QUIET_DUMP = "-Xlog:cds*=error:stderr"
# Spark splits spark.driver.extraJavaOptions on white space and quotes.
_UNSAFE_PATH = re.compile(r"[\s'\"\\]")


def cache_directories(out: Path, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Where an archive may live, in order of preference (see the module's doc)."""
    candidates = []
    cache = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(cache):
        candidates.append(Path(cache) / "eventq" / "analytics")
    elif environ.get("HOME", "") not in ("", "/"):
        candidates.append(Path(environ["HOME"]) / ".cache" / "eventq" / "analytics")
    candidates.append(out / ".cache")
    return candidates


def java_executable(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The java that Spark's launcher runs: $JAVA_HOME/bin/java, else the PATH's."""
    if environ.get("JAVA_HOME"):
        return Path(environ["JAVA_HOME"]) / "bin" / "java"
    found = shutil.which("java", path=environ.get("PATH"))
    return None if found is None else Path(found)


def _stat(path: Path) -> list[object]:
    try:
        status = path.stat()
    except OSError:
        return [path.name, None]
    return [path.name, status.st_size, status.st_mtime_ns]


def install_key(java: Path, spark_home: Path) -> str:
    """What an archive is valid for: the Java runtime of `java` (its real
    path, its JVM library's size and time) and the Spark install of
    `spark_home` (its real path, its jars' names, sizes and times). The JVM
    checks the same before it maps an archive."""
    binary = java.resolve()
    runtime = binary.parent.parent
    jars = spark_home.resolve() / "jars"
    try:
        listed = sorted(jars.glob("*.jar"))
    except OSError:
        listed = []
    described = {
        "java": [str(binary), _stat(binary), _stat(runtime / "lib" / "server" / "libjvm.so")],
        "spark": [str(jars), *(_stat(jar) for jar in listed)],
    }
    text = json.dumps(described, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ClassData:
    """The archive of one install in `directory`: `dumping` says whether
    this run's JVM makes it (there is none yet) or maps it."""

    directory: Path
    key: str
    dumping: bool
    # Unique to the run: concurrent runs dump side by side, and the last
    # rename wins (their archives are equivalent).
    staging: Path

    @property
    def archive(self) -> Path:
        return self.directory / f"{PREFIX}{self.key}{SUFFIX}"

    def java_options(self) -> str:
        """The JVM options that map the archive, or make it at the JVM's exit."""
        if self.dumping:
            return f"-XX:ArchiveClassesAtExit={self.staging} {LOG_TO_STDERR} {QUIET_DUMP}"
        return f"-XX:SharedArchiveFile={self.archive} {LOG_TO_STDERR}"

    def publish(self, java: Path, classpath: str) -> bool:
        """After the dumping JVM exited: check the staging file with a JVM
        of `java` and the dumping JVM's `classpath`, then rename it into
        place; whether it was. A staging file that fails the check is
        removed."""
        if not self.dumping or not self.staging.is_file():
            return False
        command = [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={self.staging}"]
        command += ["-Xlog:disable", "-cp", classpath, "-version"]
        try:
            checked = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=CHECK_TIMEOUT_SECS,
                check=False,
            )
            if checked.returncode != 0:
                self.staging.unlink(missing_ok=True)
                return False
            os.replace(self.staging, self.archive)
        except (OSError, subprocess.SubprocessError):
            self.staging.unlink(missing_ok=True)
            return False
        _remove_unused(self.directory, keep=self.archive, now=time.time())
        return True

    def discard(self) -> None:
        """Remove the archive (a JVM could not start with it)."""
        self.archive.unlink(missing_ok=True)


def _remove_unused(directory: Path, keep: Path, now: float) -> None:
    """Staging files of crashed runs, and archives of other installs unused
    for UNUSED_ARCHIVE_SECS."""
    for path in directory.glob(f"*{PREFIX}*{SUFFIX}*"):
        try:
            age = now - path.stat().st_mtime
            staging = path.name.startswith(".")
            if path != keep and age > (STALE_STAGING_SECS if staging else UNUSED_ARCHIVE_SECS):
                path.unlink()
        except OSError:
            pass


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def find(out: Path, spark_home: Path, environ: Mapping[str, str] = os.environ) -> ClassData | None:
    """The archive for this install, to map or to make, in the first
    writable cache directory; None when there is no java to key it by or no
    directory to keep it in (the run goes without)."""
    java = java_executable(environ)
    if java is None:
        return None
    key = install_key(java, spark_home)
    for directory in cache_directories(out, environ):
        if _UNSAFE_PATH.search(str(directory.absolute())):
            continue
        archive = directory / f"{PREFIX}{key}{SUFFIX}"
        if archive.is_file() and os.access(archive, os.R_OK):
            with contextlib.suppress(OSError):
                os.utime(archive)  # used: not pruned as another install's
            return ClassData(directory.absolute(), key, False, archive)
        if _writable(directory):
            staging = directory / f".{PREFIX}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
            _remove_unused(directory, keep=archive, now=time.time())
            return ClassData(directory.absolute(), key, True, staging.absolute())
    return None
