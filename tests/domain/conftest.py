"""A realm of its own per test for the domain's verify_action tests."""

from __future__ import annotations

import pytest

from tests.domain.harness import Domain


@pytest.fixture
def domain(database_url: str) -> Domain:
    return Domain(database_url)
