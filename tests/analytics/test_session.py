"""analytics/session.py: the settings a session gets (no JVM started)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.errors import PySparkRuntimeError

from analytics import classdata, session


def java_options(config: dict[str, str]) -> str:
    return config.get("spark.driver.extraJavaOptions", "")


def test_a_short_embedded_job_compiles_with_the_first_jit_tier_only():
    c1 = session.SHORT_JOB_JAVA_OPTIONS
    assert c1 in java_options(session.session_config(True, session.SHORT_JOB_BYTES))
    assert c1 in java_options(session.session_config(True, 1000))
    assert c1 not in java_options(session.session_config(True, session.SHORT_JOB_BYTES + 1))
    assert c1 not in java_options(session.session_config(True, None))
    # a cluster's (or spark-submit's) JVMs are its own
    assert java_options(session.session_config(False, 1000)) == ""
    embedded = session.session_config(True)
    assert embedded["spark.ui.enabled"] == "false"
    assert embedded["spark.sql.sources.parallelPartitionDiscovery.threshold"] == "100000"
    assert "spark.sql.sources.parallelPartitionDiscovery.threshold" not in session.session_config(
        False
    )
    assert session.session_config(False)["spark.sql.session.timeZone"] == "UTC"


def class_data(tmp_path: Path, dumping: bool) -> classdata.ClassData:
    directory = tmp_path / "cache"
    directory.mkdir(exist_ok=True)
    made = classdata.ClassData(directory, "k", dumping, directory / ".spark-k-1-a.jsa")
    if not dumping:
        made.archive.write_bytes(b"classes")
    return made


def test_an_embedded_jvm_maps_or_makes_the_class_archive_a_clusters_does_not(tmp_path):
    mapped, making = class_data(tmp_path, False), class_data(tmp_path, True)
    options = java_options(session.session_config(True, 1000, mapped))
    assert session.SHORT_JOB_JAVA_OPTIONS in options
    assert f"-XX:SharedArchiveFile={mapped.archive}" in options
    options = java_options(session.session_config(True, None, making))
    assert f"-XX:ArchiveClassesAtExit={making.staging}" in options
    assert options.startswith(session.LOCAL_CONFIG["spark.driver.extraJavaOptions"])
    assert java_options(session.session_config(False, 1000, mapped)) == ""


class FakeBuilder:
    """SparkSession.builder's chain; getOrCreate fails as pyspark does when
    the JVM exits before its gateway is up, while `failing` is in the JVM's
    options."""

    def __init__(self, failing: str, condition: str = "JAVA_GATEWAY_EXITED") -> None:
        self.failing, self.condition = failing, condition
        self.options: dict[str, str] = {}
        self.started: list[str] = []

    def appName(self, name):
        return self

    def master(self, master):
        return self

    def config(self, key, value):
        self.options[key] = value
        return self

    def getOrCreate(self):
        java = self.options["spark.driver.extraJavaOptions"]
        self.started.append(java)
        if self.failing in java:
            raise PySparkRuntimeError(errorClass=self.condition, messageParameters={})
        return SimpleNamespace(sparkContext=SimpleNamespace(setLogLevel=lambda level: None))


def fake_spark(monkeypatch, builder: FakeBuilder) -> None:
    monkeypatch.setattr(session, "SparkSession", SimpleNamespace(builder=builder))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)


def test_a_jvm_that_cannot_start_with_the_archive_starts_without_and_it_goes(
    tmp_path, monkeypatch, capsys
):
    mapped = class_data(tmp_path, False)
    builder = FakeBuilder("SharedArchiveFile")
    fake_spark(monkeypatch, builder)
    session.build_session(input_bytes=1000, class_data=mapped)
    assert len(builder.started) == 2
    assert "SharedArchiveFile" not in builder.started[1]
    assert session.SHORT_JOB_JAVA_OPTIONS in builder.started[1]
    assert not mapped.archive.exists()
    assert f"the JVM did not start with {mapped.archive}" in capsys.readouterr().err


def test_a_jvm_that_cannot_start_otherwise_is_an_error(tmp_path, monkeypatch):
    mapped = class_data(tmp_path, False)
    builder = FakeBuilder("-Xmn")  # in every embedded JVM's options
    fake_spark(monkeypatch, builder)
    with pytest.raises(PySparkRuntimeError):
        session.build_session(class_data=mapped)
    assert len(builder.started) == 2
    assert mapped.archive.exists()  # not the archive's fault: kept
    builder = FakeBuilder("SharedArchiveFile", condition="MASTER_URL_INVALID")
    fake_spark(monkeypatch, builder)
    with pytest.raises(PySparkRuntimeError):
        session.build_session(class_data=mapped)
    assert len(builder.started) == 1
