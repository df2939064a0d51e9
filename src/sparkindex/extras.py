"""The optional parts of sparkindex, each a pip extra, and the one error for a missing one.

The core install reads SQLite, writes Tantivy and runs Spark. Each other database driver, search
engine client and the progress server is an extra (``pip install 'sparkindex[postgres]'``), imported
only where a pipeline names it. The code that chooses it (by URL scheme, or by command) calls
:func:`require` first, so a missing extra fails there, before Spark starts, in one line that names
what needs it and the command that installs it: never an ``ImportError`` from inside a driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from sparkindex.config.urls import normalize_url
from sparkindex.errors import ConfigError

#: extra -> the modules it provides, by import name (pyproject.toml lists their distributions)
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg",),
    "mysql": ("MySQLdb", "pymysql", "pymysqlreplication"),
    "opensearch": ("opensearchpy",),
    "elasticsearch": ("elastic_transport",),
    "aws": ("botocore",),
    "server": ("starlette", "uvicorn", "websockets", "prometheus_client"),
}

#: the database drivers sparkindex chooses (config.urls.DRIVERS), by SQLAlchemy driver name:
#: (the extra that installs it, its module, the database's name). SQLite's is Python's own.
DRIVERS: dict[str, tuple[str, str, str]] = {
    "postgresql+psycopg": ("postgres", "psycopg", "PostgreSQL"),
    "mysql+mysqldb": ("mysql", "MySQLdb", "MySQL/MariaDB"),
}


class MissingExtra(ConfigError):
    """A pipeline or command needs an extra that is not installed (exit code 2, like any
    configuration the user must fix). *extra* is its name, as in ``sparkindex[extra]``."""

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


def require(extra: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Import *modules* (by default every module of *extra*), or raise :class:`MissingExtra`:
    ``<what> needs the <extra> extra: pip install 'sparkindex[<extra>]'``. *what* names the part
    that needs it, after the configuration key that chose it (``source.url: the MySQL/MariaDB
    source (mysql://)``). Modules already imported cost nothing."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r} (known: {', '.join(EXTRAS)})")
    for module in EXTRAS[extra] if modules is None else modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_extra(extra, what, exc) from None


def missing_extra(extra: str, what: str, exc: ImportError) -> MissingExtra:
    """The :class:`MissingExtra` for *exc*, raised by importing a module of *extra*. A module that
    is there but does not load (a shared library it links against is missing, say) is named with
    the reason, still on one line."""
    message = f"{what} needs the {extra} extra: pip install 'sparkindex[{extra}]'"
    if not isinstance(exc, ModuleNotFoundError):  # there, but it does not load
        reason = " ".join(str(exc).split())
        message += f" ({exc.name or 'a module'} is installed but does not load: {reason})"
    return MissingExtra(message, extra)


def require_driver(url: str, key: str, role: str) -> None:
    """The driver of the database at *url* imported, or a :class:`MissingExtra` naming *key*
    (``source.url``), the *role* the database plays there (``source``, ``coordination store``)
    and the extra to install. Nothing for SQLite, a driver the URL names itself
    (``mysql+pymysql://``) or a scheme that is no database (the caller refuses those in its
    own words)."""
    drivername = normalize_url(url).split(":", 1)[0].lower()
    if drivername in DRIVERS:
        extra, module, name = DRIVERS[drivername]
        require(extra, f"{key}: the {name} {role} ({drivername.split('+', 1)[0]}://)", [module])


def fix_for(exc: BaseException, otherwise: str) -> str:
    """The fix a check suggests for *exc*: installing the extra it names when an extra is what
    is missing, *otherwise* the check's own advice."""
    if isinstance(exc, MissingExtra):
        return f"pip install 'sparkindex[{exc.extra}]'"
    return otherwise
