"""``sparkindex.resources``: a pipeline's store, source and target, opened as the pipeline says
and closed by the block that opened them; the choice between a database and an index source."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sparkindex.config.loader import parse_pipeline
from sparkindex.errors import ConfigError
from sparkindex.index_source import IndexSource
from sparkindex.resources import open_source, open_source_url, open_store, open_target
from sparkindex.sources.registry import open_database
from sparkindex.sources.sqlite import SqliteSource
from sparkindex.targets.tantivy import TantivyTarget

PIPELINE = """\
source:
  url: sqlite:///shop.db
coordination:
  url: sqlite:///state.db
  prefix: x_
target:
  url: tantivy://index
job:
  source_timeout_s: 42
indexes:
  - alias: items
    table: items
"""


def test_the_openers_follow_the_pipeline(tmp_path: Path) -> None:
    """Its prefix, its source timeout, and paths taken from its folder."""
    sqlite3.connect(tmp_path / "shop.db").close()
    pipeline = parse_pipeline(PIPELINE, base_dir=tmp_path)
    with open_store(pipeline) as store, open_source(pipeline) as source, open_target(pipeline) as target:
        assert store.t.prefix == "x_" and (tmp_path / "state.db").exists()
        assert isinstance(source, SqliteSource) and source.statement_timeout_s == 42
        assert isinstance(target, TantivyTarget) and target.root == tmp_path / "index"


def test_a_source_url_of_a_target_scheme_is_an_index_source(tmp_path: Path) -> None:
    pipeline = parse_pipeline(PIPELINE.replace("sqlite:///shop.db", "tantivy://old"), base_dir=tmp_path)
    with open_source(pipeline) as source:
        assert isinstance(source, IndexSource)
        assert isinstance(source.target, TantivyTarget) and source.target.root == tmp_path / "old"


def test_the_sources_package_opens_databases_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"an index as a source is opened by sparkindex\.resources"):
        open_database(f"tantivy://{tmp_path}")
    with open_source_url(f"sqlite:///{tmp_path / 'x.db'}") as source:
        assert isinstance(source, SqliteSource)
