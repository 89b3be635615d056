"""Fixtures for tests that need the real PostgreSQL and the real server.

A session gets its own database (created from EVENTQ_DATABASE_URL's server
and credentials, migrated, dropped at the end), so runs never share state.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from server.database.migrate import migrate
from tests.support import API_KEY_SECRET, Api, ServerProcess, World, rabbitmqctl

# Users the tests create in this process get keys the servers can check.
os.environ["EVENTQ_API_KEY_SECRET"] = API_KEY_SECRET

DEFAULT_URL = "host=127.0.0.1 port=5432 dbname=eventq"


@contextmanager
def scratch_database(name: str) -> Iterator[str]:
    """A migrated database `name` on EVENTQ_DATABASE_URL's server, dropped after."""
    base = os.environ.get("EVENTQ_DATABASE_URL") or DEFAULT_URL
    admin = conninfo.make_conninfo(base, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = conninfo.make_conninfo(base, dbname=name)
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with scratch_database(f"eventq_test_{os.getpid()}_{uuid.uuid4().hex[:8]}") as url:
        yield url


@pytest.fixture(scope="session")
def amqp_url() -> Iterator[str]:
    """A RabbitMQ vhost of this session's own, deleted at the end."""
    vhost = f"eventq_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        rabbitmqctl("delete_vhost", vhost)


@pytest.fixture(scope="session")
def world(database_url: str) -> World:
    return World(database_url)


@pytest.fixture
def start_server(
    database_url: str, amqp_url: str, tmp_path: Path
) -> Iterator[Callable[..., ServerProcess]]:
    """Start a server with extra environment; stopped (or killed) after the test.
    Servers consume their own queue in the session's RabbitMQ vhost."""
    started: list[ServerProcess] = []

    def start(state_dir: Path | None = None, **env: str) -> ServerProcess:
        server = ServerProcess(database_url, state_dir or tmp_path / "state", env, amqp_url)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="session")
def server(
    database_url: str, amqp_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server shared by the tests that need no special timing."""
    process = ServerProcess(
        database_url, tmp_path_factory.mktemp("shared-state"), amqp_url=amqp_url
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def api(server: ServerProcess, world: World) -> Iterator[Callable[..., Api]]:
    """`api()` makes a client for a new user (of a new realm unless given)."""
    clients: list[Api] = []

    def make(
        realm: str | None = None,
        role: str = "member",
        on: ServerProcess | None = None,
        prefix: str = "/api/v1",
    ) -> Api:
        client = Api(on or server, world.user(realm, role), prefix)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
