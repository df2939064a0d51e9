"""Database and index URLs: drivers for plain schemes, paths relative to the pipeline file."""

from __future__ import annotations

from pathlib import Path


def resolve_sqlite_url(url: str, base_dir: Path) -> str:
    """``sqlite:///rel.db`` is relative to the pipeline file, not to wherever the command runs."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith("sqlite:////"):
        rel = url[len(prefix) :]
        if rel and not rel.startswith(":memory:"):
            path, _, query = rel.partition("?")
            resolved = (base_dir / path).resolve()
            return f"sqlite:///{resolved}" + (f"?{query}" if query else "")
    return url


def resolve_tantivy_url(url: str, base_dir: Path) -> str:
    """``tantivy://rel`` (an index to rebuild, as a source) is relative to the pipeline file too."""
    prefix = "tantivy://"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and len(url) > len(prefix):
        return f"{prefix}{(base_dir / url[len(prefix) :]).resolve()}"
    return url


DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+mysqldb",
    "mariadb": "mysql+mysqldb",
}


def normalize_url(url: str) -> str:
    """Plain ``postgresql://`` / ``mysql://`` URLs get the drivers sparkindex ships with."""
    scheme, sep, rest = url.partition("://")
    return f"{DRIVERS[scheme]}{sep}{rest}" if scheme in DRIVERS else url


def database_kind(url: str) -> str:
    """The kind of database or index *url* names, drivers aside: ``postgresql`` (``postgres``,
    ``postgresql+psycopg``), ``mysql`` (``mariadb``, ``mysql+mysqldb``), ``sqlite``, or the scheme."""
    scheme = normalize_url(url).split(":", 1)[0].split("+", 1)[0].lower()
    return {"postgres": "postgresql", "mariadb": "mysql"}.get(scheme, scheme)
