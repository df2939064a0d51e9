"""Row filters under change capture (issue 32): a filtered shop (``indexes[].where`` on the
products, ``relations[].where`` on their reviews) reindexed, then a writer moves rows in and out
of both filters (the same rows back and forth, over several micro-batches of at most 40 changes
where the log splits them), inserts a row that is filtered out from the start, deletes a row that
was never indexed and one that left the filter just before; ``sync --until-caught-up`` on
PostgreSQL (logical decoding), MariaDB (binlog) and SQLite (polling). Afterwards verify is clean
and the index holds exactly what the database's own evaluation of the filters selects: no
document for a row outside the root filter, no element in a product's ``reviews`` array for a
review outside the relation's filter.

The expected state is always the database's answer to the same ``WHERE`` (MariaDB, the status
column in a case-insensitive collation, compares ``"Don't Show"`` and ``"Hidden "`` equal to the
filter's ``'don''t show'`` and ``'hidden'``; PostgreSQL and SQLite do not), never a Python
re-implementation of it.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import PIPELINE_YAML
from sparkindex.jobs.reindex import ReindexJob
from sparkindex.targets.registry import open_target
from tests.capture.helpers import HOSTILE, Shop, drop_shop, make_shop
from tests.support.polled_shop import polled_shop_db

pytestmark = pytest.mark.slow

PRODUCTS = 60
SEED = 32
#: the root filter: quotes inside a literal, and a value whose case decides it on MariaDB only
ROOT_WHERE = "deleted_at IS NULL AND status NOT IN ('hidden', 'don''t show')"
REVIEW_WHERE = "rating >= 3"
GONE = "2025-06-01 00:00:00"  # a deleted_at value
#: (status, deleted_at) a writer may give a product; whether each is inside the filter is the database's say
STATES: list[tuple[str, str | None]] = [
    ("active", None),
    ("hidden", None),
    ("active", GONE),
    ("don't show", None),
    ("Don't Show", None),  # in on PostgreSQL and SQLite, out on MariaDB (a case-insensitive collation)
    ("Hidden ", None),
    ('O\'Brien "quoted"', None),
]
IN = ("active", None)
OUT = ("hidden", None)

KINDS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("polling"),
]


# -- the shop -------------------------------------------------------------------------------------------
def filtered_yaml(text: str, polling: bool) -> str:
    """The demo pipeline with the two filters (JSON strings are YAML double-quoted scalars)."""
    root = f"    complexity: 3.0\n    where: {json.dumps(ROOT_WHERE)}\n"
    if polling:
        root += "    changes: {column: updated_at, tombstones: gone}\n"
    text = text.replace("    complexity: 3.0\n", root, 1)
    text = text.replace(
        "        table: reviews\n", f"        table: reviews\n        where: {json.dumps(REVIEW_WHERE)}\n", 1
    )
    assert text.count("where: ") == 2, text
    return text


def polling_shop(directory: Path) -> Shop:
    """The shop in SQLite with an ``updated_at`` in every table and a tombstone table: polled."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    polled_shop_db(db, PRODUCTS)
    text = PIPELINE_YAML.format(partition_size=100).replace("master: local[*,4]", "master: local[2,4]")
    (directory / "pipeline.yaml").write_text(
        text + "sync:\n  trigger_s: 0.2\n  max_batch_changes: 40\n", encoding="utf-8"
    )
    return Shop(directory, f"sqlite:///{db}", load_pipeline(directory / "pipeline.yaml"), "unused")


@pytest.fixture(params=KINDS)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Shop]]:
    """The shop with ``deleted_at`` and ``status`` on its products, some rows already outside the
    filter, and the filtered pipeline written (not yet indexed)."""
    kind = request.param
    directory = tmp_path / "shop"
    if kind == "polling":
        shop = polling_shop(directory)
        services: dict[str, str] = {}
    else:
        services = request.getfixturevalue("services")
        shop = make_shop(kind, directory, services, PRODUCTS, extra="  max_batch_changes: 40\n")
    stamp = {"postgres": "TIMESTAMP", "mysql": "DATETIME", "polling": "DATETIME"}[kind]
    # MariaDB as most servers have it (the test server's default is utf8mb4_bin): case- and
    # trailing-space-insensitive comparisons
    collate = " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci" if kind == "mysql" else ""
    shop.sql(
        f"ALTER TABLE products ADD COLUMN deleted_at {stamp} NULL",
        f"ALTER TABLE products ADD COLUMN status VARCHAR(40){collate} NOT NULL DEFAULT 'active'",
    )
    shop.sql(
        f"UPDATE products SET deleted_at = '{GONE}' WHERE id % 5 = 0",
        "UPDATE products SET status = 'hidden' WHERE id % 7 = 0",
        "UPDATE products SET status = 'Don''t Show' WHERE id % 11 = 0",
        "UPDATE products SET status = 'don''t show' WHERE id % 13 = 0",
    )
    path = directory / "pipeline.yaml"
    path.write_text(filtered_yaml(path.read_text(encoding="utf-8"), kind == "polling"), encoding="utf-8")
    shop = dataclasses.replace(shop, pipeline=load_pipeline(path))
    try:
        yield kind, shop
    finally:
        if kind != "polling":
            drop_shop(kind, shop, services)


# -- what the index must hold ---------------------------------------------------------------------------
def rows(shop: Shop, statement: str) -> list[tuple[Any, ...]]:
    engine = shop.engine()
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(statement))]
    finally:
        engine.dispose()


def expected(shop: Shop) -> dict[str, list[int]]:
    """Document id -> the ids in its ``reviews`` array, by the database's evaluation of the filters."""
    kept: dict[int, list[int]] = {pid: [] for (pid,) in rows(shop, f"SELECT id FROM products WHERE {ROOT_WHERE}")}
    for rid, pid in rows(shop, f"SELECT id, product_id FROM reviews WHERE {REVIEW_WHERE} ORDER BY id"):
        if pid in kept:
            kept[pid].append(rid)
    return {str(pid): sorted(reviews) for pid, reviews in kept.items()}


def indexed(shop: Shop) -> dict[str, dict[str, Any]]:
    """Every stored document, by id, read back in keyset pages."""
    pipeline = shop.pipeline
    target = open_target(pipeline.target.url, pipeline.base_dir, pipeline.target.options)
    out: dict[str, dict[str, Any]] = {}
    try:
        after = None
        while True:
            page = target.read_documents("products", after=after, size=500)
            for doc in page:
                assert doc.id not in out, f"document {doc.id} read twice"
                out[doc.id] = doc.source
            if len(page) < 500:
                return out
            after = page[-1].sort_key
    finally:
        target.close()


def held(docs: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    return {i: sorted(r["id"] for r in (d.get("reviews") or [])) for i, d in docs.items()}


def assert_index_matches_filters(shop: Shop) -> dict[str, dict[str, Any]]:
    report = shop.verify()
    assert (report.missing, report.extra, report.stale, report.duplicates) == (0, 0, 0, 0), report.to_dict()
    want = expected(shop)
    docs = indexed(shop)
    assert report.index_docs == len(want), report.to_dict()
    outside = sorted(set(docs) - set(want), key=int)
    assert not outside, f"documents of rows outside the filter: {outside}"
    assert sorted(want, key=int) == sorted(docs, key=int)
    wrong = {i: (got, want[i]) for i, got in held(docs).items() if got != want[i]}
    assert not wrong, f"reviews arrays (held, expected) that differ from the relation's filter: {wrong}"
    return docs


# -- the writer -----------------------------------------------------------------------------------------
Statement = tuple[str, dict[str, Any]]


class Writer:
    """Builds the deterministic sequence of transactions, then commits them one by one. Polling
    sees a row only when its ``updated_at`` moves, and a delete only through a tombstone."""

    def __init__(self, shop: Shop, polling: bool) -> None:
        self.shop = shop
        self.polling = polling
        self.streams: list[list[list[Statement]]] = []

    def _touch(self) -> str:
        return ", updated_at = :ts" if self.polling else ""

    def set_state(self, pid: int, state: tuple[str, str | None]) -> list[Statement]:
        sql = f"UPDATE products SET status = :s, deleted_at = :d{self._touch()} WHERE id = :id"
        return [(sql, {"s": state[0], "d": state[1], "id": pid})]

    def set_rating(self, rid: int, rating: int) -> list[Statement]:
        return [(f"UPDATE reviews SET rating = :r{self._touch()} WHERE id = :id", {"r": rating, "id": rid})]

    def insert_product(self, pid: int, name: str, state: tuple[str, str | None]) -> list[Statement]:
        cols = "id, name, description, price, stock, category_id, created_at, status, deleted_at"
        vals = ":id, :n, :n, 9.5, 4, 1, '2025-02-03 04:00:00', :s, :d"
        if self.polling:
            cols, vals = cols + ", updated_at", vals + ", :ts"
        return [
            (f"INSERT INTO products ({cols}) VALUES ({vals})", {"id": pid, "n": name, "s": state[0], "d": state[1]})
        ]

    def insert_review(self, rid: int, pid: int, rating: int) -> list[Statement]:
        cols, vals = "id, product_id, author_id, rating, body", ":id, :p, 1, :r, :b"
        if self.polling:
            cols, vals = cols + ", updated_at", vals + ", :ts"
        params = {"id": rid, "p": pid, "r": rating, "b": HOSTILE[1]}
        return [(f"INSERT INTO reviews ({cols}) VALUES ({vals})", params)]

    def delete_product(self, pid: int) -> list[Statement]:
        out: list[Statement] = []
        reviews = [r for (r,) in rows(self.shop, f"SELECT id FROM reviews WHERE product_id = {pid}")]
        out.append(("DELETE FROM reviews WHERE product_id = :id", {"id": pid}))
        out.append(("DELETE FROM products WHERE id = :id", {"id": pid}))
        if self.polling:
            tomb = "INSERT INTO gone (tbl, row_key, updated_at) VALUES (:t, :k, :ts)"
            for rid in reviews:
                out.append((tomb, {"t": "reviews", "k": json.dumps({"id": rid, "product_id": pid})}))
            out.append((tomb, {"t": "products", "k": json.dumps({"id": pid})}))
        return out

    def stream(self, *transactions: list[Statement]) -> None:
        """Transactions that must commit in this order (interleaved with the other streams)."""
        self.streams.append(list(transactions))

    def run(self, rng: random.Random) -> int:
        """Commit every stream's transactions, the streams interleaved by *rng*; each transaction
        gets the next ``updated_at`` (polling)."""
        engine = sa.create_engine(normalize_url(self.shop.url))
        pending = [list(s) for s in self.streams if s]
        n = 0
        try:
            while pending:
                stream = rng.choice(pending)
                transaction = stream.pop(0)
                if not stream:
                    pending.remove(stream)
                n += 1
                ts = f"2026-01-02 00:{n // 60:02d}:{n % 60:02d}"
                with engine.begin() as conn:
                    for sql, params in transaction:
                        conn.execute(sa.text(sql), {**params, "ts": ts} if self.polling else params)
        finally:
            engine.dispose()
        return n


@dataclasses.dataclass
class Scenario:
    leaver: int  # inside the filter at the reindex, flipped back and forth, ends outside
    returner: int  # outside (deleted_at set) at the reindex, flipped, ends inside
    flippers: list[int]  # flipped back and forth, ending wherever the seed says
    never_indexed_deleted: int  # outside the filter throughout, then deleted
    left_then_deleted: int  # leaves the filter, then its row is deleted
    review_out: int  # a review of a kept product: flipped, ends below the relation's filter
    review_in: int  # a review of a kept product: flipped, ends inside it
    inserted_out: int = 100_001  # inserted outside the filter (with a 5-star review), stays out
    inserted_then_in: int = 100_002  # inserted outside the filter, then moved in
    inserted_in: int = 100_003  # inserted inside the filter, hostile name


def write_changes(shop: Shop, polling: bool) -> Scenario:
    rng = random.Random(SEED)
    inside = sorted(int(i) for i in expected(shop))
    deleted = sorted(r for (r,) in rows(shop, "SELECT id FROM products WHERE deleted_at IS NOT NULL"))
    leaver = rng.choice(inside)
    untouched = [i for i in inside if i != leaver]
    returner = rng.choice(deleted)
    never = rng.choice([i for i in deleted if i != returner])
    left_then_deleted = rng.choice(untouched)
    untouched.remove(left_then_deleted)
    flippers = rng.sample(
        [i for i in range(1, PRODUCTS + 1) if i not in (leaver, returner, never, left_then_deleted)], 4
    )
    untouched = [i for i in untouched if i not in flippers]
    reviews = rows(shop, "SELECT id, product_id, rating FROM reviews ORDER BY id")
    good = [r for r, p, rating in reviews if p in untouched and rating >= 3]
    bad = [r for r, p, rating in reviews if p in untouched and rating < 3]
    review_out, review_in = rng.choice(good), rng.choice(bad)
    scenario = Scenario(leaver, returner, flippers, never, left_then_deleted, review_out, review_in)

    w = Writer(shop, polling)

    def flips(pid: int, last: tuple[str, str | None] | None) -> None:
        states = [rng.choice(STATES) for _ in range(rng.randint(3, 5))]
        # out and in again within the sequence, whatever the seed picks
        w.stream(*(w.set_state(pid, s) for s in [OUT, IN, *states, *([last] if last else [])]))

    flips(leaver, OUT)
    flips(returner, IN)
    for pid in flippers:
        flips(pid, None)
    for rid, last in ((review_out, 1), (review_in, 5)):
        w.stream(*(w.set_rating(rid, r) for r in [1, 5, 2, 4, *rng.sample(range(1, 6), 3), last]))
    for rid, _, _ in rng.sample([r for r in reviews if r[0] not in (review_out, review_in)], 6):
        w.stream(*(w.set_rating(rid, rng.randint(1, 5)) for _ in range(rng.randint(2, 4))))
    w.stream(
        w.insert_product(scenario.inserted_out, HOSTILE[0], ("active", GONE))
        + w.insert_review(900_001, scenario.inserted_out, 5)
    )
    w.stream(
        w.insert_product(scenario.inserted_then_in, HOSTILE[3], ("don't show", None))
        + w.insert_review(900_002, scenario.inserted_then_in, 4)
        + w.insert_review(900_003, scenario.inserted_then_in, 2),
        w.set_state(scenario.inserted_then_in, IN),
    )
    w.stream(
        w.insert_product(scenario.inserted_in, HOSTILE[2], IN)
        + w.insert_review(900_004, scenario.inserted_in, 3)
        + w.insert_review(900_005, scenario.inserted_in, 1)
    )
    w.stream(w.delete_product(never))
    w.stream(w.set_state(left_then_deleted, OUT), w.delete_product(left_then_deleted))
    committed = w.run(rng)
    assert committed >= 40, committed
    return scenario


# -- the test -------------------------------------------------------------------------------------------
def test_rows_moving_in_and_out_of_the_filters_under_sync(shop: tuple[str, Shop], spark: Any) -> None:
    kind, s = shop
    total = s.scalar("SELECT COUNT(*) FROM products")
    filtered = s.scalar(f"SELECT COUNT(*) FROM products WHERE {ROOT_WHERE}")
    assert 0 < filtered < total  # the premise: the filter leaves rows out
    # and the database decides it: "Don't Show" is 'don''t show' to MariaDB's collation only
    assert ("11" in expected(s)) is (kind != "mysql")
    summary = ReindexJob(s.pipeline, None, new=True, spark_factory=lambda: spark).run()
    assert summary.status == "COMPLETED", summary
    assert summary.indexed == filtered, f"the reindex indexed {summary.indexed} rows, the filter selects {filtered}"
    before = assert_index_matches_filters(s)
    assert any(len(d.get("reviews") or []) for d in before.values())

    first = s.sync(spark)  # records the position (creates the slot): changes from here on are captured
    assert (first.applied, first.deleted) == (0, 0)
    assert_index_matches_filters(s)
    sc = write_changes(s, kind == "polling")
    summary_sync = s.sync(spark)
    assert summary_sync.deleted >= 2, summary_sync  # the leaver and the row that left, then went

    docs = assert_index_matches_filters(s)
    assert str(sc.leaver) in before and str(sc.leaver) not in docs
    assert str(sc.returner) not in before and str(sc.returner) in docs
    for pid in (sc.never_indexed_deleted, sc.left_then_deleted, sc.inserted_out):
        assert str(pid) not in docs, pid
    assert docs[str(sc.inserted_in)]["name"] == HOSTILE[2]
    assert held(docs)[str(sc.inserted_in)] == [900_004]
    assert docs[str(sc.inserted_then_in)]["name"] == HOSTILE[3]
    assert held(docs)[str(sc.inserted_then_in)] == [900_002]
    [(product_out,)] = rows(s, f"SELECT product_id FROM reviews WHERE id = {sc.review_out}")
    [(product_in,)] = rows(s, f"SELECT product_id FROM reviews WHERE id = {sc.review_in}")
    assert sc.review_out in held(before)[str(product_out)] and sc.review_out not in held(docs)[str(product_out)]
    assert sc.review_in not in held(before)[str(product_in)] and sc.review_in in held(docs)[str(product_in)]
    assert all(r["rating"] >= 3 for d in docs.values() for r in (d.get("reviews") or []))
