"""Why a build path was taken, and partitions that really differ in size, as explain reports them.

Why: the in-database builder decides per plan whether PostgreSQL writes the canonical JSON (column
types) and per document (values); a user tuning ``build:`` must see which path runs and why. The
calculator estimates every partition at the same size; explain counts them, so skewed key ranges
show before a job runs into them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from sparkindex.config import load_pipeline
from sparkindex.jobs.explain import explain
from tests.fresh_databases import fresh_database


def _pipeline(folder: Path, url: str, index_extra: str = "") -> Path:
    config = folder / "pipeline.yaml"
    config.write_text(
        f"source:\n  url: {url}\nindexes:\n  - alias: things\n    table: things\n    partition_size: 100\n"
        + index_extra,
        encoding="utf-8",
    )
    return config


def _things(extra: list[sa.Column[Any]], rows: list[dict[str, object]]) -> Callable[[sa.Engine], None]:
    def load(engine: sa.Engine) -> None:
        meta = sa.MetaData()
        things = sa.Table("things", meta, sa.Column("id", sa.Integer, primary_key=True), *extra)
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(things.insert(), rows)

    return load


def test_skewed_ranges_are_counted_largest_first(tmp_path: Path) -> None:
    """Integer keys are split evenly over their extent: clustered ids leave most ranges empty."""
    ids = [*range(1, 901), *range(100_001, 100_101)]
    load = _things([sa.Column("name", sa.String(20))], [{"id": i, "name": f"n{i}"} for i in ids])
    with fresh_database("sqlite", tmp_path, dict, load) as url:
        plan = explain(load_pipeline(_pipeline(tmp_path, url))).partitions
    assert plan.count == 10 and plan.source_rows == 1000 and plan.rows_per_partition == 100
    assert plan.counted
    assert [p.rows for p in plan.largest] == [900, 100, 0, 0, 0]
    assert plan.largest[0].after is None and plan.largest[1].upto is None


@pytest.mark.postgres
def test_postgres_paths_and_their_reasons(tmp_path: Path, services: dict[str, str]) -> None:
    rows = [{"id": i, "name": f"n{i}", "tags": ["a", "b"], "price": i / 4} for i in range(1, 11)]
    extra: list[sa.Column[Any]] = [
        sa.Column("name", sa.String(20)),
        sa.Column("tags", postgresql.ARRAY(sa.Text)),
        sa.Column("price", sa.Float(precision=53)),
    ]
    with fresh_database("postgres", tmp_path, lambda: services, _things(extra, rows)) as url:
        # an array column: PostgreSQL assembles, Python re-encodes, and the column is named
        auto = explain(load_pipeline(_pipeline(tmp_path, url)))
        assert auto.build.path == "in-database" and auto.build.builder == "JsonAggregationBuilder"
        assert "things.tags" in auto.build.reason and "build: auto" in auto.build.reason
        assert auto.document is not None and auto.document["tags"] == ["a", "b"]
        # without it, the server writes the canonical JSON
        narrow = explain(load_pipeline(_pipeline(tmp_path, url, "    columns: [id, name, price]\n")), doc_id="3")
        assert narrow.build.path == "server-written JSON" and narrow.doc_id == "3"
        assert narrow.build.document is not None and narrow.build.document.startswith("server-written")
        assert narrow.document == {"id": 3, "name": "n3", "price": 0.75}
        # build: python, said so
        python = explain(load_pipeline(_pipeline(tmp_path, url, "    build: python\n")))
        assert python.build.path == "python" and "build: python" in python.build.reason
        assert python.canonical == auto.canonical  # the same bytes by either path
        assert python.statements[0].startswith("SELECT things.id") and len(python.statements) == 1
