"""Shared by the scaffold tests: a reflected rich schema on SQLite, and walking drafts by path."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from sparkindex.resources import open_source_url
from sparkindex.scaffold.reflect import SchemaGraph, reflect_schema
from sparkindex.scaffold.relations import IndexDraft, RelationDraft
from tests.scaffold.extras import load_rich_schema


def rich_sqlite(folder: Path) -> str:
    """A SQLite file with TPC-H and the extras; returns its URL."""
    url = f"sqlite:///{folder / 'source.db'}"
    engine = sa.create_engine(url)
    try:
        load_rich_schema(engine)
    finally:
        engine.dispose()
    return url


def reflect(url: str) -> SchemaGraph:
    source = open_source_url(url)
    try:
        return reflect_schema(source)
    finally:
        source.close()


def relation(index: IndexDraft, path: str) -> RelationDraft:
    """The relation at a dotted path of relation names (``orders.customer.nation``)."""
    relations = index.relations
    found: RelationDraft | None = None
    for name in path.split("."):
        matches = [r for r in relations if r.name == name]
        assert matches, f"{path}: no relation {name!r} among {[r.name for r in relations]}"
        found = matches[0]
        relations = found.children
    assert found is not None
    return found


def names(relations: list[RelationDraft]) -> list[str]:
    return [r.name for r in relations]
