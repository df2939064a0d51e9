"""Opening the database ``init`` reflects, so that a wrong URL fails at once, in one line.

A SQLite URL naming a file that does not exist would silently create an empty database;
a server that does not answer would hold the command until the driver's own timeout (libpq
waits for ever). Both are refused here, before anything is reflected, and no message ever
shows the URL's password.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from sparkindex.config.secrets import error_line, redact_url
from sparkindex.config.urls import normalize_url
from sparkindex.errors import ConfigError
from sparkindex.extras import require_driver
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source
from sparkindex.sources.registry import DATABASE_SCHEMES

#: seconds to wait for a server to accept the connection
CONNECT_TIMEOUT_S = 10
#: statement timeout for ``init``'s own queries (reflection, row counts)
STATEMENT_TIMEOUT_S = 120.0


def open_database(url: str) -> Source:
    """The :class:`Source` for *url*, reachable; a :class:`ConfigError` naming what is wrong."""
    shown = redact_url(url)
    try:
        parsed = sa.make_url(normalize_url(url))
    except ArgumentError:
        raise ConfigError(f"--source {shown!r}: not a database URL (e.g. sqlite:///shop.db, postgresql://…)") from None
    scheme = parsed.get_backend_name()
    if scheme not in DATABASE_SCHEMES:
        raise ConfigError(
            f"--source {shown}: init reflects relational databases ({', '.join(DATABASE_SCHEMES)}), not {scheme!r}"
        )
    if scheme == "sqlite":
        _require_file(parsed, shown)
    else:
        require_driver(url, "--source", "source")
        _probe(parsed, shown)
    try:
        return open_source_url(url, STATEMENT_TIMEOUT_S)
    except NoSuchModuleError:
        raise ConfigError(f"--source {shown}: no driver for {parsed.drivername!r}") from None


def _require_file(url: sa.URL, shown: str) -> None:
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise ConfigError(f"--source {shown}: name a SQLite file (sqlite:///path/to/file.db)")
    path = Path(database)
    if not path.is_file():
        raise ConfigError(f"--source {shown}: no such SQLite file: {path}")


def _probe(url: sa.URL, shown: str) -> None:
    """One connection with a short timeout: the server answers and lets us in, or we say why."""
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}, poolclass=sa.pool.NullPool)
    except NoSuchModuleError:
        raise ConfigError(f"--source {shown}: no driver for {url.drivername!r}") from None
    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        raise ConfigError(f"--source {shown}: cannot connect: {first_line(exc.orig)}") from None
    finally:
        engine.dispose()


first_line = error_line  # one helper for every error line shown to a person
