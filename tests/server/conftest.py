"""Fixtures of the server tests that work in a Domain realm of their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import scratch_database
from tests.domain.harness import Domain
from tests.support import Api, ServerProcess


@pytest.fixture
def domain(database_url: str) -> Domain:
    """iago admin, hamlet, othello, polonius guest; Denmark (public: iago,
    hamlet, othello), Verona (public: hamlet; default), Scotland (private:
    iago, othello)."""
    return Domain(database_url)


@pytest.fixture
def apis(server: ServerProcess, domain: Domain) -> Iterator[dict[str, Api]]:
    """An API client per Domain user, on the shared server."""
    clients = {name: Api(server, account) for name, account in domain.accounts.items()}
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture
def own_db() -> Iterator[str]:
    """A database of its own, migrated, dropped after the test (the
    background-update tests change tables every test shares otherwise)."""
    with scratch_database(f"eventq_test_{uuid.uuid4().hex[:8]}") as url:
        yield url
