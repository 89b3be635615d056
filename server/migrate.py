"""`eventq db migrate`: apply the SQL files of deploy/migrations once each, in
name order, each in its own transaction, recorded in `schema_migrations`."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
from pathlib import Path

import psycopg

log = logging.getLogger("eventq.migrate")

# Serializes concurrent migrators (two shards starting at once): any constant
# that no other application uses as an advisory lock key.
_LOCK_KEY = 0x6576656E7471  # "eventq"


class MigrationError(RuntimeError):
    """Raised by `migrate` when the migrations cannot be found or one fails."""


def migrations_dir() -> Path:
    """deploy/migrations of a source checkout, else the copy in the wheel."""
    checkout = Path(__file__).resolve().parent.parent / "deploy" / "migrations"
    if checkout.is_dir():
        return checkout
    try:
        packaged = importlib.resources.files("server.migrations")
    except ModuleNotFoundError:
        raise MigrationError("no migrations found (neither deploy/ nor the package)") from None
    return Path(str(packaged))


def latest_migration(directory: Path | None = None) -> str:
    """The name of the newest migration shipped with this version."""
    files = sorted((directory or migrations_dir()).glob("*.sql"))
    if not files:
        raise MigrationError("no migrations found")
    return files[-1].name


def migrate(database_url: str, directory: Path | None = None) -> list[str]:
    """Apply every migration not yet applied; returns the names applied."""
    directory = directory or migrations_dir()
    files = sorted(directory.glob("*.sql"))
    if not files:
        raise MigrationError(f"no migrations in {directory}")
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
                sql = path.read_text()
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
