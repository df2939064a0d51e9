"""Soft deletes (issue 32, ``indexes[].deletes: soft``): a row that is gone leaves its document in
the index as a tombstone (its last body, ``"_deleted": true``, ``"_deleted_at"``) whose content
hash says what it is, so verify accepts it without reading bodies.

The shop in SQLite, polled (``changes: {column: updated_at, tombstones: gone}``: a delete is a row
of the ``gone`` table), indexed into Tantivy; ``sync --until-caught-up`` applies the changes.
Routed tombstones in a search engine: ``test_routing.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sparkindex.capture.sync.run import SyncRun, SyncSummary
from sparkindex.config import load_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.demo.shop import PIPELINE_YAML
from sparkindex.documents.planning import resolve_plans
from sparkindex.documents.tombstones import TOMBSTONE_HASH_PREFIX
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.resources import open_source_url, open_store
from sparkindex.targets.base import StoredDocument
from sparkindex.targets.registry import open_target
from sparkindex.verify.local import LocalResources, local_runner
from sparkindex.verify.repair import RepairResult, repair
from sparkindex.verify.verifier import Verifier, VerifyReport
from tests.support.polled_shop import polled_shop_db

pytestmark = pytest.mark.slow

PRODUCTS = 40
COLUMNS = "id, name, description, price, stock, category_id, created_at"


# -- a polled shop (shared with test_routing.py) ------------------------------------------------------------
def polled_shop(directory: Path, index_yaml: str, target: str | None = None) -> tuple[Pipeline, Path]:
    """The shop in SQLite with ``updated_at`` everywhere and a ``gone`` table of deletes, polled;
    *index_yaml*: more of the products index (``    deletes: soft\\n``)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    polled_shop_db(db, PRODUCTS)
    text = PIPELINE_YAML.format(partition_size=20).replace("master: local[*,4]", "master: local[2,4]")
    changes = "    changes: {column: updated_at, tombstones: gone}\n"
    text = text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n{changes}{index_yaml}")
    if target is not None:
        text = text.replace("url: tantivy://index", f"url: {target}")
    (directory / "pipeline.yaml").write_text(text + "sync:\n  trigger_s: 0.2\n", encoding="utf-8")
    return load_pipeline(directory / "pipeline.yaml"), db


def sql(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    conn = sqlite3.connect(db)
    for statement, params in statements:
        conn.execute(statement, params)
    conn.commit()
    conn.close()


def delete_product(db: Path, product: int, at: str, logged: bool = True) -> None:
    """Delete a product's row; *logged*: with its row in ``gone`` (a delete polling sees)."""
    gone = [("INSERT INTO gone VALUES ('products', ?, ?)", (f'{{"id": {product}}}', at))] if logged else []
    sql(db, ("DELETE FROM products WHERE id = ?", (product,)), *gone)


def reindex(pipeline: Pipeline, spark: Any) -> None:
    assert ReindexJob(pipeline, None, new=True, spark_factory=lambda: spark).run().status == "COMPLETED"


def sync(pipeline: Pipeline, spark: Any) -> SyncSummary:
    return SyncRun(pipeline, None, until_caught_up=True, spark_factory=lambda: spark).run()


def stored(pipeline: Pipeline, *ids: str) -> dict[str, StoredDocument]:
    """The documents the alias holds under these ids (one copy each), read back by id."""
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    try:
        docs = target.documents_by_id("products", list(ids))
    finally:
        target.close()
    assert len({d.id for d in docs}) == len(docs), docs
    return {d.id: d for d in docs}


def verify(pipeline: Pipeline, deletes: str | None = None, fix: bool = False) -> VerifyReport | RepairResult:
    """Verify (or *fix*: repair) the products in this process; *deletes* overrides the index's mode."""
    with open_source_url(pipeline.source_url()) as source, open_store(pipeline) as store:
        target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
        [(plan, _)] = resolve_plans(pipeline, source, ["products"]).values()
        if deletes is not None:
            plan = dataclasses.replace(plan, config=plan.config.model_copy(update={"deletes": deletes}))
        plans = {"products": plan}
        verifier = Verifier(source, target, plans, local_runner(LocalResources(source, target, plans, store)))
        try:
            if fix:
                return repair(verifier, "soft-deletes")
            [report] = verifier.run()
            return report
        finally:
            target.close()


def checked(pipeline: Pipeline, deletes: str | None = None) -> VerifyReport:
    report = verify(pipeline, deletes)
    assert isinstance(report, VerifyReport)
    return report


def assert_tombstone(doc: StoredDocument, body: dict[str, Any], after: dt.datetime, before: dt.datetime) -> None:
    """*doc* is the tombstone of *body*: the same fields, marked, stamped between the two times."""
    assert doc.hash is not None and doc.hash.startswith(TOMBSTONE_HASH_PREFIX), doc.hash
    source = dict(doc.source)
    assert source.pop("_deleted") is True
    stamp = dt.datetime.fromisoformat(source.pop("_deleted_at"))
    assert stamp.utcoffset() == dt.timedelta(0) and after <= stamp <= before, stamp
    assert source == body


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)  # _deleted_at is to the millisecond


# -- the test -----------------------------------------------------------------------------------------------
def test_deleted_rows_stay_as_tombstones_that_verify_accepts(tmp_path: Path, spark: Any) -> None:
    pipeline, db = polled_shop(tmp_path / "shop", "    deletes: soft\n")
    reindex(pipeline, spark)
    assert sync(pipeline, spark).applied == 0
    live = stored(pipeline, "5", "7", "9")
    assert not any(d.hash.startswith(TOMBSTONE_HASH_PREFIX) for d in live.values() if d.hash)
    row7 = sqlite3.connect(db).execute(f"SELECT {COLUMNS} FROM products WHERE id = 7").fetchone()

    # two rows deleted: their documents stay, as tombstones (counted as deletes)
    delete_product(db, 5, "2026-01-02 00:00:00")
    delete_product(db, 7, "2026-01-02 00:00:00")
    started = now()
    summary = sync(pipeline, spark)
    ended = dt.datetime.now(dt.UTC)
    assert (summary.deleted, summary.applied) == (2, 0)
    marked = stored(pipeline, "5", "7")
    for doc_id in ("5", "7"):
        assert_tombstone(marked[doc_id], live[doc_id].source, started, ended)
    report = checked(pipeline)
    assert (report.missing, report.extra, report.stale, report.duplicates) == (0, 0, 0, 0), report.to_dict()
    assert report.tombstones == 2 and report.clean
    # the marks are searchable: readers skip tombstones with _deleted (a field of the mapping)
    with open_target(pipeline.target.url, pipeline.base_dir) as target:
        assert sorted(h.id for h in target.search("products", "_deleted:true", limit=10)) == ["5", "7"]
    # in hard mode the same tombstones are documents without rows: extra
    assert checked(pipeline, deletes="hard").extra == 2

    # deleted again, a tombstone is not rewritten; a row that comes back brings its document back
    delete_product(db, 5, "2026-01-03 00:00:00")
    back = "2026-01-04 00:00:00"
    sql(db, (f"INSERT INTO products ({COLUMNS}, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (*row7, back)))
    summary = sync(pipeline, spark)
    assert (summary.deleted, summary.applied) == (0, 1)
    assert stored(pipeline, "5")["5"] == marked["5"]
    revived = stored(pipeline, "7")["7"]
    assert revived.hash is not None and not revived.hash.startswith(TOMBSTONE_HASH_PREFIX)
    assert revived.source == {**live["7"].source, "updated_at": "2026-01-04T00:00:00"}
    report = checked(pipeline)
    assert report.clean and report.tombstones == 1, report.to_dict()

    # a delete the sync never saw: verify reports the live document extra, repair marks it
    delete_product(db, 9, "", logged=False)
    assert checked(pipeline).extra == 1
    started = now()
    result = verify(pipeline, fix=True)
    assert isinstance(result, RepairResult)
    assert result.before[0].extra == 1 and result.before[0].repaired == {"indexed": 0, "deleted": 1, "failed": 0}
    assert result.after[0].clean and result.after[0].tombstones == 2, result.after[0].to_dict()
    assert_tombstone(stored(pipeline, "9")["9"], live["9"].source, started, dt.datetime.now(dt.UTC))


EMBED = (
    "    transform: {function: 'tests.support.toy_embedding:embed', version: '1', on_change: [name, description],"
    " adds: [embedding]}\n"
    "    mapping: {properties: {embedding: {type: knn_vector, dimension: 8}}}\n"
)


def test_removed_documents_leave_the_transform_cache(tmp_path: Path, spark: Any) -> None:
    """An ``on_change`` transform keeps an entry per document; a document removed (here: turned
    into a tombstone) by the sync or by repair takes its entry with it."""
    pipeline, db = polled_shop(tmp_path / "shop", "    deletes: soft\n" + EMBED)

    def cached(*ids: str) -> set[str]:
        with open_store(pipeline) as store:
            return set(store.transform_cache.lookup("products", list(ids)))

    reindex(pipeline, spark)
    sync(pipeline, spark)
    assert cached("5", "9", "11") == {"5", "9", "11"}
    delete_product(db, 5, "2026-01-02 00:00:00")
    assert sync(pipeline, spark).deleted == 1
    assert cached("5", "9", "11") == {"9", "11"}
    delete_product(db, 9, "", logged=False)  # unseen: repair finds it extra
    result = verify(pipeline, fix=True)
    assert isinstance(result, RepairResult) and result.before[0].extra == 1 and result.after[0].clean
    assert cached("5", "9", "11") == {"11"}
