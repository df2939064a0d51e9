"""Polling change capture at its boundaries, end to end (``sync --until-caught-up`` on Spark, verify):
a tie larger than a batch on an integer row version and on a timestamp set by one bulk UPDATE
(SQLite and PostgreSQL), ties across a batch cut, two indexes each with its own ``changes:``, and
an offset stored before cursors existed. Measured on 2d9d709: 6,667 rows tied at one version with
``max_batch_changes: 500`` applied 0 on every sync, which exited 0 with 6,667 stale documents."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.capture.sync.run import SyncRun, SyncSummary
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.coordination.store import CoordinationStore
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import ConfigError
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.sources.registry import open_source
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import verify_alias
from tests.capture.helpers import HOSTILE
from tests.e2e.shop import copy_shop, fresh_database

pytestmark = pytest.mark.slow

T0 = "2026-01-01 00:00:00"
PRODUCTS = 1400
TIED = 1300  # products set to one value in one transaction: more than two batches of 500
SHOP_TABLES = ("products", "categories", "reviews", "users")
STORES = [f"{h}-{i}" for i, h in enumerate(HOSTILE)] + [f"{['a', 'B', 'É'][i % 3]}{i}" for i in range(40)]


def _pipeline_text(url: str, changes: str, extra_index: str = "") -> str:
    text = PIPELINE_YAML.format(partition_size=200).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    changes: {changes}\n")
    text = text.replace("job:\n", f"{extra_index}job:\n")
    return text + "sync:\n  trigger_s: 0.2\n  max_batch_changes: 500\n"


def _sqlite_shop(directory: Path, changes: str, extra_index: str = "", stores: bool = False) -> tuple[Pipeline, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    generate_shop(db, PRODUCTS)
    conn = sqlite3.connect(db)
    for table in SHOP_TABLES:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN version INTEGER NOT NULL DEFAULT 1")
        conn.execute(f"ALTER TABLE {table} ADD COLUMN updated_at DATETIME NOT NULL DEFAULT '{T0}'")
    if stores:
        conn.execute("CREATE TABLE stores (code TEXT PRIMARY KEY, name TEXT NOT NULL, updated_at DATETIME NOT NULL)")
        conn.executemany("INSERT INTO stores VALUES (?, ?, ?)", [(c, f"store {c}", T0) for c in STORES])
    conn.commit()
    conn.close()
    (directory / "pipeline.yaml").write_text(_pipeline_text("sqlite:///shop.db", changes, extra_index), "utf-8")
    return load_pipeline(directory / "pipeline.yaml"), db


def _sql(db: Path, *statements: str) -> None:
    """One transaction: every row it touches gets its value in one commit."""
    conn = sqlite3.connect(db)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def _reindex(pipeline: Pipeline, spark: Any) -> None:
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"


def _sync(pipeline: Pipeline, spark: Any) -> SyncSummary:
    """``sync --until-caught-up``: it must end by itself (the test's timeout says if it does not)."""
    return SyncRun(pipeline, None, until_caught_up=True, spark_factory=lambda: spark).run()


def _assert_clean(pipeline: Pipeline, aliases: tuple[str, ...] = ("products",)) -> None:
    source = open_source(pipeline.source_url())
    target = open_target(pipeline.target.url, pipeline.base_dir)
    try:
        for alias in aliases:
            [(plan, _)] = resolve_plans(pipeline, source, [alias]).values()
            report = verify_alias(source, target, plan)
            assert report.clean, (alias, report.to_dict())
    finally:
        source.close()


def _name(pipeline: Pipeline, alias: str, doc_id: str) -> Any:
    target = open_target(pipeline.target.url, pipeline.base_dir)
    hits = [h for h in target.search(alias, f'_id:"{doc_id}"', limit=3) if h.id == doc_id]
    return hits[0].source.get("name") if hits else None


@pytest.mark.timeout(600)
def test_a_tie_larger_than_a_batch_on_an_integer_version(tmp_path: Path, spark: Any) -> None:
    """1,300 products and 300 reviews of other products get version 5 in one transaction, with
    batches of 500: every one of them reaches the index, in several batches, and the run ends."""
    pipeline, db = _sqlite_shop(tmp_path / "shop", "{column: version, key_diff_every_s: 3600}")
    _reindex(pipeline, spark)
    _sync(pipeline, spark)
    _sql(
        db,
        f"UPDATE products SET name = name || ' v2', version = 5 WHERE id <= {TIED}",
        f"UPDATE reviews SET body = 'tied review', version = 5 WHERE product_id > {TIED}",
    )
    summary = _sync(pipeline, spark)
    assert summary.batches >= 4 and summary.applied >= TIED
    _assert_clean(pipeline)
    assert str(_name(pipeline, "products", str(TIED))).endswith(" v2")
    assert _sync(pipeline, spark).applied == 0


@pytest.mark.timeout(600)
def test_ties_across_a_batch_cut_on_an_integer_version(tmp_path: Path, spark: Any) -> None:
    """400 products at version 2, then 200 at version 3: a batch of 500 ends inside the second
    tie, whose other 100 rows come next (value > last alone would drop them)."""
    pipeline, db = _sqlite_shop(tmp_path / "shop", "{column: version, key_diff_every_s: 3600}")
    _reindex(pipeline, spark)
    _sync(pipeline, spark)
    _sql(db, "UPDATE products SET name = name || ' two', version = 2 WHERE id <= 400")
    _sql(db, "UPDATE products SET name = name || ' three', version = 3 WHERE id > 400 AND id <= 600")
    summary = _sync(pipeline, spark)
    assert summary.applied == 600 and summary.batches >= 2
    _assert_clean(pipeline)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def timestamp_shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Pipeline, sa.Engine]]:
    """The shop with ``updated_at`` on every table: SQLite text date/times, or PostgreSQL
    ``timestamptz``; polled with the default overlap window."""
    directory = tmp_path / "shop"
    changes = "{column: updated_at, key_diff_every_s: 3600}"
    if request.param == "sqlite":
        pipeline, db = _sqlite_shop(directory, changes)
        engine = sa.create_engine(f"sqlite:///{db}")
        yield pipeline, engine
        engine.dispose()
        return
    server = request.getfixturevalue("services")["postgres"]
    directory.mkdir(parents=True)
    generate_shop(directory / "shop.db", PRODUCTS)
    name = f"poll_{uuid.uuid4().hex[:10]}"
    url = fresh_database(server, name)
    copy_shop(directory / "shop.db", normalize_url(url))
    engine = sa.create_engine(normalize_url(url))
    with engine.begin() as conn:
        for table in SHOP_TABLES:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN updated_at timestamptz NOT NULL DEFAULT '{T0}+00'")
    (directory / "pipeline.yaml").write_text(_pipeline_text(url, changes), "utf-8")
    yield load_pipeline(directory / "pipeline.yaml"), engine
    engine.dispose()
    admin = sa.create_engine(normalize_url(server), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


@pytest.mark.timeout(600)
def test_a_bulk_update_of_a_timestamp_column(timestamp_shop: tuple[Pipeline, sa.Engine], spark: Any) -> None:
    """``UPDATE products SET updated_at = <one value>`` over 1,300 rows (what ``now()`` does in
    one transaction), batches of 500: all of them reach the index and the run ends."""
    pipeline, engine = timestamp_shop
    _reindex(pipeline, spark)
    _sync(pipeline, spark)
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE products SET name = name || ' bulk', updated_at = :t WHERE id <= {TIED}"),
            {"t": "2026-03-01 12:00:00" + ("+00" if engine.dialect.name == "postgresql" else "")},
        )
    summary = _sync(pipeline, spark)
    assert summary.batches >= 3 and summary.applied >= TIED
    _assert_clean(pipeline)
    assert str(_name(pipeline, "products", "1")).endswith(" bulk")


@pytest.mark.timeout(600)
def test_two_indexes_each_poll_by_their_own_changes(tmp_path: Path, spark: Any) -> None:
    """products poll by an integer version, stores (hostile text keys) by a timestamp: both are
    honoured, updates and a delete of each reach their index."""
    stores_index = (
        "  - alias: stores\n    table: stores\n    partition_size: 20\n"
        "    changes: {column: updated_at, overlap_s: 1, key_diff_every_s: 3600}\n"
    )
    pipeline, db = _sqlite_shop(tmp_path / "shop", "{column: version, key_diff_every_s: 3600}", stores_index, True)
    _reindex(pipeline, spark)
    _sync(pipeline, spark)
    quoted = STORES[0].replace("'", "''")
    _sql(
        db,
        "UPDATE products SET name = 'renamed', version = 2 WHERE id = 7",
        "UPDATE stores SET name = 'renamed store', updated_at = '2026-02-01 00:00:00' "
        f"WHERE code IN ('{quoted}', 'a0', 'B1')",
        f"DELETE FROM stores WHERE code = '{STORES[3]}'",
    )
    summary = _sync(pipeline, spark)
    assert summary.applied >= 4 and summary.deleted == 1
    assert _name(pipeline, "products", "7") == "renamed"
    assert _name(pipeline, "stores", "a0") == "renamed store"
    _assert_clean(pipeline, ("products", "stores"))


def test_a_second_index_that_polls_a_shared_table_by_another_column_is_refused(tmp_path: Path) -> None:
    """categories is in the products tree (polled by version there) and its own index asks for
    updated_at: one table is read by one column, so the pipeline is refused, naming the place."""
    categories_index = (
        "  - alias: categories\n    table: categories\n    changes: {column: updated_at, key_diff_every_s: 3600}\n"
    )
    pipeline, _ = _sqlite_shop(tmp_path / "shop", "{column: version}", categories_index)
    run = SyncRun(pipeline, None, until_caught_up=True)
    with pytest.raises(ConfigError) as caught:
        run.prepare()
    message = str(caught.value)
    assert "pipeline.yaml: indexes[1].changes" in message and "'categories'" in message
    assert "'updated_at'" in message and "'version'" in message and "indexes[0].changes" in message


@pytest.mark.timeout(600)
def test_an_offset_stored_before_cursors_resumes(tmp_path: Path, spark: Any) -> None:
    """A sync stored ``{"ts", "w", "d"}`` at the version of a tie it had cut (the old reader's
    stuck state: it kept only what lay above ts). After the upgrade it resumes and delivers the
    whole tie."""
    pipeline, db = _sqlite_shop(tmp_path / "shop", "{column: version, key_diff_every_s: 3600}")
    _reindex(pipeline, spark)
    _sync(pipeline, spark)
    _sql(db, f"UPDATE products SET name = name || ' v2', version = 5 WHERE id <= {TIED}")
    store = CoordinationStore(pipeline.coordination_url(), pipeline.coordination.prefix)
    offsets = store.offsets
    [(alias, saved)] = offsets.offsets(pipeline.sync.group).items()
    offsets.save(pipeline.sync.group, {alias: (5, {"ts": 5, "w": [], "d": 3}, saved.index)})
    summary = _sync(pipeline, spark)
    assert summary.applied >= TIED
    _assert_clean(pipeline)
    assert offsets.offsets(pipeline.sync.group)[alias].offset["ts"] == 5
