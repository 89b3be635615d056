"""`eventq db migrate`: apply the SQL files of deploy/migrations once each, in
name order, each in its own transaction, recorded in `schema_migrations`.

The files are read as package resources of `server.migrations` (deploy/migrations
in a checkout, inside the wheel when installed), so an installed package needs
nothing from the checkout."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
from importlib.resources.abc import Traversable

import psycopg

log = logging.getLogger("eventq.migrate")

# Serializes concurrent migrators (two shards starting at once): any constant
# that no other application uses as an advisory lock key.
_LOCK_KEY = 0x6576656E7471  # "eventq"


class MigrationError(RuntimeError):
    """Raised by `migrate` when the migrations cannot be found or one fails."""


def migration_files() -> list[Traversable]:
    """The SQL migrations shipped with this version, in name order.

    Raises MigrationError when the package holds none (a broken install)."""
    try:
        package = importlib.resources.files("server.migrations")
    except ModuleNotFoundError:
        raise MigrationError("the package server.migrations is not installed") from None
    files = sorted(
        (entry for entry in package.iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: entry.name,
    )
    if not files:
        raise MigrationError(f"no migrations in the package server.migrations ({package})")
    return files


def latest_migration() -> str:
    """The name of the newest migration shipped with this version."""
    return migration_files()[-1].name


def migrate(database_url: str) -> list[str]:
    """Apply every migration not yet applied; returns the names applied."""
    files = migration_files()
    done: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    name       text PRIMARY KEY,
                    sha256     text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """
            )
            applied: dict[str, str] = dict(
                conn.execute("SELECT name, sha256 FROM schema_migrations").fetchall()
            )
            for path in files:
                sql = path.read_text(encoding="utf-8")
                digest = hashlib.sha256(sql.encode()).hexdigest()
                if path.name in applied:
                    if applied[path.name] != digest:
                        log.warning(
                            "migration %s changed after it was applied; not applied again",
                            path.name,
                        )
                    continue
                log.info("applying migration %s", path.name)
                try:
                    with conn.transaction():
                        conn.execute(sql.encode())
                        conn.execute(
                            "INSERT INTO schema_migrations (name, sha256) VALUES (%s, %s)",
                            (path.name, digest),
                        )
                except psycopg.Error as exc:
                    raise MigrationError(f"migration {path.name} failed: {exc}") from exc
                done.append(path.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return done
