"""analytics/classdata.py: where the JVM's class-data archive lives, which
install it is for, and how it is put in place (no JVM: a script stands in
for java)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from analytics import classdata


def fake_install(root: Path, check_exit: int = 0) -> tuple[dict[str, str], Path]:
    """A Java runtime whose `java` exits with `check_exit` and logs its
    arguments, and a Spark install of two jars; (environment, spark home)."""
    java = root / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f'#!/bin/sh\necho "$@" >> {root / "java.log"}\nexit {check_exit}\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    (root / "jdk" / "lib" / "server").mkdir(parents=True)
    (root / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"jvm 17")
    spark = root / "pyspark"
    (spark / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (spark / "jars" / name).write_bytes(name.encode())
    environ = {"JAVA_HOME": str(root / "jdk"), "HOME": str(root / "home"), "PATH": "/usr/bin"}
    return environ, spark


def test_the_archive_lives_in_the_users_cache_else_under_out(tmp_path):
    out = tmp_path / "out"
    home = {"HOME": "/home/op"}
    assert classdata.cache_directories(out, home) == [
        Path("/home/op/.cache/eventq/analytics"),
        out / ".cache",
    ]
    xdg = {"HOME": "/home/op", "XDG_CACHE_HOME": "/var/cache/op"}
    assert classdata.cache_directories(out, xdg)[0] == Path("/var/cache/op/eventq/analytics")
    # systemd's DynamicUser: HOME=/ (not writable); a relative XDG_CACHE_HOME is ignored
    assert classdata.cache_directories(out, {"HOME": "/"}) == [out / ".cache"]
    assert classdata.cache_directories(out, {"XDG_CACHE_HOME": "cache"}) == [out / ".cache"]


def test_the_key_changes_with_the_java_runtime_or_a_spark_jar(tmp_path):
    environ, spark = fake_install(tmp_path)
    java = Path(environ["JAVA_HOME"]) / "bin" / "java"
    key = classdata.install_key(java, spark)
    assert classdata.install_key(java, spark) == key
    (spark / "jars" / "spark-sql.jar").write_bytes(b"spark-sql 4.3.1")
    changed_jar = classdata.install_key(java, spark)
    assert changed_jar != key
    (tmp_path / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"jvm 17.0.16")
    assert classdata.install_key(java, spark) not in (key, changed_jar)


def test_a_run_without_an_archive_dumps_one_then_the_check_puts_it_in_place(tmp_path):
    environ, spark = fake_install(tmp_path)
    made = classdata.find(tmp_path / "out", spark, environ)
    assert made is not None
    assert made.dumping
    assert made.directory == tmp_path / "home" / ".cache" / "eventq" / "analytics"
    assert made.staging.parent == made.directory
    assert made.staging.name.startswith(".")
    options = made.java_options().split()
    assert f"-XX:ArchiveClassesAtExit={made.staging}" in options
    # the JVM's warnings on stderr (stdout is the summary), the dump's quiet
    assert options[-3:] == ["-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=error:stderr"]

    made.staging.write_bytes(b"classes")  # what the JVM wrote as it exited
    java = Path(environ["JAVA_HOME"]) / "bin" / "java"
    assert made.publish(java, "/spark/jars/a.jar:/spark/jars/b.jar")
    assert made.archive.read_bytes() == b"classes"
    assert not made.staging.exists()
    checked = (tmp_path / "java.log").read_text().split()
    assert checked[:2] == ["-Xshare:on", f"-XX:SharedArchiveFile={made.staging}"]
    assert checked[-3:] == ["-cp", "/spark/jars/a.jar:/spark/jars/b.jar", "-version"]

    mapped = classdata.find(tmp_path / "out", spark, environ)
    assert mapped is not None
    assert not mapped.dumping
    assert mapped.java_options().split() == [
        f"-XX:SharedArchiveFile={made.archive}", "-Xlog:disable", "-Xlog:all=warning:stderr"
    ]  # fmt: skip


def test_an_archive_the_check_refuses_is_not_put_in_place(tmp_path):
    environ, spark = fake_install(tmp_path, check_exit=1)
    made = classdata.find(tmp_path / "out", spark, environ)
    assert made is not None
    made.staging.write_bytes(b"cut short")
    assert not made.publish(Path(environ["JAVA_HOME"]) / "bin" / "java", "a.jar")
    assert not made.archive.exists()
    assert not made.staging.exists()
    # no file at all (the JVM was killed before it wrote one): nothing to check
    assert not made.publish(Path(environ["JAVA_HOME"]) / "bin" / "java", "a.jar")
    assert len((tmp_path / "java.log").read_text().splitlines()) == 1


def test_an_unwritable_cache_falls_back_to_out_and_an_unsplittable_path_to_none(tmp_path):
    environ, spark = fake_install(tmp_path)
    (tmp_path / "home").write_text("not a directory")
    found = classdata.find(tmp_path / "out", spark, environ)
    assert found is not None
    assert found.directory == tmp_path / "out" / ".cache"
    # Spark splits the JVM options on spaces and quotes
    assert classdata.find(tmp_path / "my out", spark, {**environ, "HOME": "/"}) is None


def test_staging_files_of_crashed_runs_and_archives_of_old_installs_go(tmp_path):
    environ, spark = fake_install(tmp_path)
    directory = tmp_path / "home" / ".cache" / "eventq" / "analytics"
    directory.mkdir(parents=True)
    old = time.time() - 8 * 86400
    crashed = directory / ".spark-0000-123-abcd.jsa"
    running = directory / ".spark-0000-456-ef01.jsa"
    upgraded = directory / "spark-0000.jsa"
    recent = directory / "spark-1111.jsa"
    for path in (crashed, running, upgraded, recent):
        path.write_bytes(b"x")
    os.utime(crashed, (old, old))
    os.utime(upgraded, (old, old))
    made = classdata.find(tmp_path / "out", spark, environ)
    assert made is not None
    assert made.dumping
    assert not crashed.exists()
    assert running.exists()
    made.staging.write_bytes(b"classes")
    assert made.publish(Path(environ["JAVA_HOME"]) / "bin" / "java", "a.jar")
    assert not upgraded.exists()
    assert recent.exists()
    assert made.archive.exists()


def test_the_java_is_java_home_s_else_the_paths(tmp_path):
    environ, _ = fake_install(tmp_path)
    assert classdata.java_executable(environ) == tmp_path / "jdk" / "bin" / "java"
    bin_dir = tmp_path / "jdk" / "bin"
    without = {k: v for k, v in environ.items() if k != "JAVA_HOME"}
    assert classdata.java_executable({**without, "PATH": str(bin_dir)}) == bin_dir / "java"
    assert classdata.java_executable({**without, "PATH": str(tmp_path / "nowhere")}) is None
