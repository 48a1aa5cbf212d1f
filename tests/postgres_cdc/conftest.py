"""Fixtures of the PostgreSQL change-data-capture tests.

``postgres_cdc_url`` (tests/conftest.py) is the session's PostgreSQL with ``wal_level=logical``.

``cdc_db`` is a fresh database on it per test (slots and publications of a test cannot see another
test's tables); dropped afterwards with the slots made in it.
"""

from __future__ import annotations

import pytest

from tests.support.cdc_databases import fresh_database


@pytest.fixture
def cdc_db(postgres_cdc_url, unique):
    with fresh_database(postgres_cdc_url, f"cdc_{unique}") as db:
        yield db
