"""analytics/session.py: the settings a session gets (no JVM started)."""

from __future__ import annotations

from analytics import session


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
