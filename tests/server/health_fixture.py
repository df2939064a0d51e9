"""The states the page's health sections show, each made for real (no row written by hand):

* a failing preflight check: a table the pipeline names renamed away in the source;
* a gap in a sync's log: a consumer group that never stored an offset for an alias whose index
  exists (what `sync` meets after a reindex built without change capture), refused under
  ``on_gap: fail`` and reconciled on Spark under ``reconcile``, with changes the log never
  delivered in between (stale, extra, missing);
* a verify run with drift: documents deleted, changed and added behind the index's back, found
  by verify's own range logic and recorded as every verify records.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.sync.run import SyncRun, SyncSummary
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import LogGap
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source, open_store
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.run import VerifyOutcome, run_verify
from tests.jobs.planting import built_documents, plant, tantivy

T0 = "2026-01-01 00:00:00"
#: a document id no row has: what verify reports as extra
EXTRA_KEY = (10**9,)


def polling_shop(directory: Path, products: int = 120) -> Pipeline:
    """The sample shop with an ``updated_at`` column polled for changes (any database can)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    generate_shop(db, products)
    conn = sqlite3.connect(db)
    for table in ("products", "categories", "reviews", "users"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN updated_at DATETIME NOT NULL DEFAULT '{T0}'")
    conn.commit()
    conn.close()
    text = PIPELINE_YAML.format(partition_size=40).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("    complexity: 3.0\n", "    complexity: 3.0\n    changes: {column: updated_at}\n")
    (directory / "pipeline.yaml").write_text(text + "sync:\n  trigger_s: 0.2\n", encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml")


def reindex(pipeline: Pipeline, spark: Any) -> None:
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"


def sql(pipeline: Pipeline, *statements: str) -> None:
    conn = sqlite3.connect(pipeline.base_dir / "shop.db")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def changes_the_log_never_delivers(pipeline: Pipeline) -> None:
    """Writes that keep ``updated_at`` as it was: no poll sees them, only a reconcile does.
    One stale document (3), one extra (4: its row deleted), one missing (a new row, 5000)."""
    sql(
        pipeline,
        "UPDATE products SET name = 'renamed where no log saw it' WHERE id = 3",
        "DELETE FROM reviews WHERE product_id = 4",
        "DELETE FROM products WHERE id = 4",
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at, updated_at) "
        f"VALUES (5000, 'added where no log saw it', 'x', 1.0, 1, 1, '{T0}', '{T0}')",
    )


def sync(pipeline: Pipeline, spark: Any, group: str, on_gap: str | None = None) -> SyncSummary:
    run = SyncRun(
        pipeline,
        None,
        group=group,
        until_caught_up=True,
        spark_factory=lambda: spark,
        on_gap=on_gap,  # type: ignore[arg-type]
    )
    return run.run()


def refused_gap(pipeline: Pipeline, spark: Any, group: str) -> LogGap:
    """`sync --group <new> --on-gap fail` on an alias built before the group existed: exit 3."""
    with pytest.raises(LogGap) as info:
        sync(pipeline, spark, group, on_gap="fail")
    return info.value


def reconciled_gap(pipeline: Pipeline, spark: Any, group: str) -> SyncSummary:
    """The same group with ``on_gap: reconcile``: verify/repair on Spark, then the stream."""
    summary = sync(pipeline, spark, group, on_gap="reconcile")
    assert summary.reconciled["products"]["stale"] == 1, summary.reconciled
    return summary


def verify_in_process(pipeline: Pipeline) -> VerifyOutcome:
    """verify as the CLI runs it (recorded as trigger ``cli``), its ranges run in this process
    instead of Spark tasks: the same range logic, builder, target scans and record."""
    with open_source(pipeline) as source, tantivy(pipeline) as target, open_store(pipeline) as store:
        plans = {a: p for a, (p, _) in resolve_plans(pipeline, source, ["products"]).items()}
        runner = local_runner(LocalResources(source, target, plans, store))
        return run_verify(pipeline, runner=runner, trigger="cli")


def drift_behind_the_index(pipeline: Pipeline) -> dict[str, str]:
    """Delete document 5, change 7, add one for a key no row has; returns the ids by kind."""
    with tantivy(pipeline) as target:
        index = target.alias_target("products")
    assert index is not None
    docs = built_documents(pipeline, "products")
    plant(pipeline, index, docs, missing="5", stale="7", extra=("8", EXTRA_KEY))
    return {"missing": "5", "stale": "7", "extra": str(EXTRA_KEY[0])}


def break_a_table(pipeline: Pipeline) -> None:
    """Rename a table the pipeline reads: `check` must FAIL on it and say how to fix it."""
    sql(pipeline, "ALTER TABLE reviews RENAME TO reviews_archived")


def mend_the_table(pipeline: Pipeline) -> None:
    sql(pipeline, "ALTER TABLE reviews_archived RENAME TO reviews")
