"""Configuration from the environment."""

from __future__ import annotations

import pytest

from server.config import ConfigError, Settings
from server.delivery.longpoll import heartbeat_delay


def test_defaults_are_the_design_numbers():
    settings = Settings.from_env({})
    assert settings.heartbeat_secs == 45
    assert settings.heartbeat_jitter_secs == 10
    assert settings.queue_idle_timeout_secs == 600
    assert settings.queue_max_lifespan_secs == 7 * 24 * 3600
    assert settings.gc_interval_secs == 60
    assert settings.longpoll_timeout_secs == 90
    assert settings.port == 9800


def test_timings_accept_fractions_and_the_jitter_scales():
    settings = Settings.from_env(
        {"EVENTQ_HEARTBEAT_SECS": "0.45", "EVENTQ_QUEUE_IDLE_TIMEOUT_SECS": "0.25"}
    )
    assert settings.heartbeat_secs == 0.45
    assert settings.heartbeat_jitter_secs == pytest.approx(0.1)
    assert settings.queue_limits.default_lifespan_secs == 0.25


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EVENTQ_GC_INTERVAL_SECS": "-1"}, "EVENTQ_GC_INTERVAL_SECS must be a finite number"),
        ({"EVENTQ_GC_INTERVAL_SECS": "inf"}, "EVENTQ_GC_INTERVAL_SECS must be a finite number"),
        ({"EVENTQ_HEARTBEAT_SECS": "nan"}, "EVENTQ_HEARTBEAT_SECS must be a finite number"),
        ({"EVENTQ_QUEUE_MAX_EVENTS": "1.5"}, "EVENTQ_QUEUE_MAX_EVENTS must be an integer"),
        ({"EVENTQ_QUEUE_MAX_EVENTS": "0"}, "EVENTQ_QUEUE_MAX_EVENTS must be >= 1"),
        ({"EVENTQ_RESUME_MAX_EVENTS": "0"}, "EVENTQ_RESUME_MAX_EVENTS must be >= 1"),
        ({"EVENTQ_MAX_HEADER_BYTES": "512"}, "EVENTQ_MAX_HEADER_BYTES must be >= 1024"),
        ({"EVENTQ_MAX_HEADER_BYTES": "2000000"}, "EVENTQ_MAX_HEADER_BYTES must be <= 1048576"),
        ({"EVENTQ_EVENT_LOOP": "tokio"}, "EVENTQ_EVENT_LOOP must be one of uvloop, asyncio"),
        ({"EVENTQ_HTTP_SERVER": "nginx"}, "EVENTQ_HTTP_SERVER must be one of eventq, tornado"),
        ({"EVENTQ_BACKGROUND_TASKS": "maybe"}, "EVENTQ_BACKGROUND_TASKS must be on, off or auto"),
        ({"EVENTQ_BACKGROUND_SLEEP_MS": "-1"}, "EVENTQ_BACKGROUND_SLEEP_MS must be >= 0"),
        ({"EVENTQ_MODULES": "a.b, c d"}, "EVENTQ_MODULES must be dotted module names"),
        (
            {"EVENTQ_QUEUE_IDLE_TIMEOUT_SECS": "100", "EVENTQ_QUEUE_MAX_LIFESPAN_SECS": "10"},
            "EVENTQ_QUEUE_MAX_LIFESPAN_SECS must be at least",
        ),
    ],
)
def test_unusable_values_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_the_shared_secret_is_generated_once_per_installation(tmp_path):
    settings = Settings.from_env({"EVENTQ_STATE_DIR": str(tmp_path)})
    secret = settings.load_shared_secret()
    assert len(secret) >= 32
    assert settings.load_shared_secret() == secret
    assert (tmp_path / "shared_secret").stat().st_mode & 0o777 == 0o600
    other = Settings.from_env({"EVENTQ_STATE_DIR": str(tmp_path / "elsewhere")})
    assert other.load_shared_secret() != secret
    explicit = Settings.from_env({"EVENTQ_SHARED_SECRET": "s3cret", "EVENTQ_STATE_DIR": "/x"})
    assert explicit.load_shared_secret() == "s3cret"


def test_the_advertised_long_poll_timeout_outlasts_the_heartbeat():
    assert (
        Settings.from_env({"EVENTQ_HEARTBEAT_SECS": "120"}).longpoll_timeout_secs
        == 120 + (120 * 10 / 45) + 30
    )
    with pytest.raises(ConfigError, match="must be longer than the longest heartbeat wait"):
        Settings.from_env({"EVENTQ_LONGPOLL_TIMEOUT_SECS": "50"})


def test_pool_sizes_must_be_ordered():
    with pytest.raises(ConfigError, match="EVENTQ_DB_POOL_MIN must not be larger"):
        Settings.from_env({"EVENTQ_DB_POOL_MIN": "5", "EVENTQ_DB_POOL_MAX": "2"})


def test_heartbeat_delays_stay_within_the_jitter():
    delays = [heartbeat_delay(45.0, 10.0) for _ in range(2000)]
    assert all(45.0 <= d <= 55.0 for d in delays)
    # Spread over the whole window, not bunched at one end.
    assert min(delays) < 46.0
    assert max(delays) > 54.0


def test_the_event_loop_is_uvloop_unless_asyncio_is_asked_for():
    assert Settings.from_env({}).event_loop == "uvloop"
    assert Settings.from_env({"EVENTQ_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"


def test_the_http_server_is_eventq_unless_tornado_is_asked_for():
    assert Settings.from_env({}).http_server == "eventq"
    assert Settings.from_env({"EVENTQ_HTTP_SERVER": "tornado"}).http_server == "tornado"


def test_background_tasks_run_on_a_lone_server_or_the_shard_the_config_names(tmp_path):
    assert Settings.from_env({}).background_tasks
    assert not Settings.from_env({"EVENTQ_BACKGROUND_TASKS": "off"}).background_tasks
    config = tmp_path / "sharding.toml"
    config.write_text(
        'default_shard = "a"\nbackground_tasks_on = "b"\n'
        "[shards.a]\nport = 9800\n[shards.b]\nport = 9801\n"
    )
    env = {"EVENTQ_SHARDING": str(config)}
    assert not Settings.from_env(env | {"EVENTQ_SHARD": "a"}).background_tasks
    assert Settings.from_env(env | {"EVENTQ_SHARD": "b"}).background_tasks
    # The environment has the last word, either way.
    forced = env | {"EVENTQ_SHARD": "a", "EVENTQ_BACKGROUND_TASKS": "on"}
    assert Settings.from_env(forced).background_tasks
    # Unnamed: the default shard.
    config.write_text('default_shard = "a"\n[shards.a]\nport = 9800\n[shards.b]\nport = 9801\n')
    assert Settings.from_env(env | {"EVENTQ_SHARD": "a"}).background_tasks
    assert not Settings.from_env(env | {"EVENTQ_SHARD": "b"}).background_tasks
    assert Settings.from_env({"EVENTQ_MODULES": " a.b , c "}).modules == ("a.b", "c")
