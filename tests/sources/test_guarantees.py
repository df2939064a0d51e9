"""Source guarantees behind "no silent loss": unique ids, cursors of every key type, rows that
cannot be built, documents by root key and statement timeouts, on every dialect.

Runs on the conformance fixture data (:mod:`tests.sources.fixture_data`), whose keys are hostile:
collated text with mixed case and punctuation, ``|`` and ``\\``, NUMERIC and bytes keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.urls import normalize_url
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder, make_builder
from sparkindex.errors import ConfigError, TransientError
from sparkindex.keys import document_id, dump_key, load_key
from sparkindex.sources.base import KeyRange, Source
from sparkindex.sources.mysql import MysqlSource
from sparkindex.sources.postgres import PostgresSource
from sparkindex.sources.sqlite import SqliteSource
from tests.sources import fixture_data as fx
from tests.sources.conftest import LoadedDatabase

ALL = KeyRange(None, None)

# -- id: must be unique and NOT NULL ----------------------------------------------------------------

ID_ERRORS = [
    pytest.param(["n"], "indexes[0].id: column(s) 'n' of table 'labels' are not unique", id="not-unique"),
    pytest.param(["alt"], "indexes[0].id: column(s) 'alt' of table 'labels' may hold NULL", id="nullable-unique"),
    pytest.param(["n", "alt"], "indexes[0].id: column(s) 'alt' of table 'labels' may hold NULL", id="nullable-part"),
]


@pytest.mark.parametrize(("id_columns", "message"), ID_ERRORS)
def test_id_columns_that_are_not_unique_or_may_be_null_are_refused(
    source_db: Source, id_columns: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_index(source_db, IndexConfig(alias="labels", table="labels", id=id_columns), "indexes[0]")
    assert str(err.value).startswith(message), str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    "id_columns",
    [["code"], ["slug"], ["ref"], ["n", "slug"], ["ref", "code"]],
    ids=["primary-key", "unique-constraint", "unique-index", "superset-of-unique", "two-unique"],
)
def test_id_columns_kept_unique_by_the_database_are_accepted(source_db: Source, id_columns: list[str]) -> None:
    plan = resolve_index(source_db, IndexConfig(alias="labels", table="labels", id=id_columns), "indexes[0]")
    assert plan.id_columns == id_columns


def test_unique_keys_are_reflected(source_db: Source) -> None:
    assert set(source_db.table("labels").unique_keys) == {("slug",), ("ref",), ("alt",)}


# -- cursors of every key type ------------------------------------------------------------------------


def page_through(builder: DocumentBuilder, rng: KeyRange, limit: int) -> tuple[list[str], int]:
    """Document ids of *rng*, page by page, the cursor stored and loaded as the store keeps it."""
    ids: list[str] = []
    rows = 0
    cursor: str | None = None
    for _ in range(100_000):
        page = builder.page(rng, load_key(cursor), limit)
        assert len(page.docs) + len(page.failures) == page.rows
        ids.extend(d.id for d in page.docs)
        ids.extend(f.doc_id for f in page.failures)
        rows += page.rows
        if page.rows < limit:
            return ids, rows
        cursor = dump_key(page.last_key)
    raise AssertionError("keyset loop did not terminate")


@pytest.mark.parametrize("build", ["python", "auto"])
@pytest.mark.parametrize(("table", "key"), [("amounts", "amount"), ("blobs", "digest"), ("labels", "code")])
def test_stored_cursors_and_bounds_read_every_row_once(source_db: Source, table: str, key: str, build: str) -> None:
    plan = resolve_index(source_db, IndexConfig(alias=table, table=table, build=build), "indexes[0]")
    builder = make_builder(source_db, plan)
    ranges = source_db.split_keys(plan.table, [key], size=137, limit=100)
    assert len(ranges) == math.ceil(len(fx.rows()[table]) / 137)
    seen: list[str] = []
    for rng in ranges:
        stored = KeyRange(load_key(dump_key(rng.after)), load_key(dump_key(rng.upto)))
        ids, _ = page_through(builder, stored, 61)
        seen.extend(ids)
    want = [document_id([r[key]]) for r in fx.rows()[table]]
    assert len(seen) == len(set(seen)) == len(want)
    assert sorted(seen) == sorted(want)


# -- documents by root key -----------------------------------------------------------------------------


def builders(source: Source, cfg: IndexConfig) -> Iterator[DocumentBuilder]:
    """The Python builder and, where the dialect has one, the in-database builder."""
    yield DocumentBuilder(source, resolve_index(source, cfg.model_copy(update={"build": "python"}), "indexes[0]"))
    in_db = make_builder(source, resolve_index(source, cfg.model_copy(update={"build": "auto"}), "indexes[0]"))
    if type(in_db) is not DocumentBuilder:
        yield in_db


def by_keys_case(table: str, key: Sequence[str]) -> tuple[list[tuple[Any, ...]], list[str], list[str]]:
    """Every third row's key (stored and loaded as JSON), three keys no row has, and a repeat."""
    rows = fx.rows()[table]
    present = [tuple(r[k] for k in key) for r in rows[::3]]
    absent: list[tuple[Any, ...]]
    if table == "order_lines":
        absent = [(1, "no|such"), (10**6, "A"), (2, "\\N")]
    elif table == "products":
        absent = [(0,), (10**6,), (-5,)]
    else:
        absent = [("no such|code",), ("\\N",), ("zz|\\",)]
    stored = [load_key(dump_key(k)) for k in [*present, *absent, present[0]]]
    keys = [k for k in stored if k is not None]
    return keys, [document_id(k) for k in present], [document_id(k) for k in absent]


@pytest.mark.parametrize(
    ("table", "key"), [("products", ("id",)), ("order_lines", ("order_no", "line")), ("labels", ("code",))]
)
def test_documents_by_root_keys(source_db: Source, table: str, key: tuple[str, ...]) -> None:
    cfg = IndexConfig(alias=table, table=table)
    keys, present, absent = by_keys_case(table, key)
    per_page = {d.id: d for d in page_through_all(source_db, cfg)}
    for builder in builders(source_db, cfg):
        docs, failures, missing = builder.by_keys(keys)
        assert failures == []
        assert sorted(d.id for d in docs) == sorted(present), type(builder).__name__
        assert sorted(missing) == sorted(absent)
        # the same documents (bytes and hashes) as the partition reader builds
        assert all(per_page[d.id] == d for d in docs)
    assert builder.by_keys([]) == ([], [], [])


def page_through_all(source: Source, cfg: IndexConfig) -> list[Any]:
    builder = DocumentBuilder(source, resolve_index(source, cfg, "indexes[0]"))
    docs: list[Any] = []
    after = None
    while True:
        page = builder.page(ALL, after, 1000)
        docs.extend(page.docs)
        if page.rows < 1000:
            return docs
        after = page.last_key


def test_documents_by_many_keys_are_fetched_in_batches(source_db: Source) -> None:
    """More keys than one statement may bind: every one is still answered."""
    cfg = IndexConfig(alias="labels", table="labels")
    codes = [(r["code"],) for r in fx.rows()["labels"]]
    for builder in builders(source_db, cfg):
        assert len(codes) > builder.source.max_in_params
        docs, failures, missing = builder.by_keys(codes)
        assert (len(docs), failures, missing) == (len(codes), [], [])


# -- statement timeouts --------------------------------------------------------------------------------


def opened(kind: str, url: str, timeout_s: float) -> Source:
    cls = {"sqlite": SqliteSource, "postgres": PostgresSource, "mysql": MysqlSource}[kind]
    return cls(normalize_url(url), statement_timeout_s=timeout_s)


def test_statement_timeout_is_set_on_every_connection(loaded_database: LoadedDatabase) -> None:
    source = opened(loaded_database.kind, loaded_database.url, 7.5)
    try:
        with source.engine.connect() as conn:
            if loaded_database.kind == "postgres":
                assert conn.execute(sa.text("SHOW statement_timeout")).scalar_one() == "7500ms"
                # the URL's own options (search_path) survive next to the timeout
                assert conn.execute(sa.text("SELECT count(*) FROM labels")).scalar_one() == fx.N_LABELS
            elif loaded_database.kind == "mysql":
                assert float(conn.execute(sa.text("SELECT @@SESSION.max_statement_time")).scalar_one()) == 7.5
            else:
                assert source.engine_options()["connect_args"]["timeout"] == 7.5
    finally:
        source.close()


@pytest.mark.postgres
def test_a_query_longer_than_the_timeout_fails_as_transient(loaded_database: LoadedDatabase) -> None:
    if loaded_database.kind != "postgres":
        pytest.skip("pg_sleep is PostgreSQL's")
    source = opened("postgres", loaded_database.url, 0.2)
    try:
        with pytest.raises(TransientError, match=r"statement timeout 0\.2 s"), source.connect("a slow query") as conn:
            conn.execute(sa.text("SELECT pg_sleep(5)"))
        # and the next statement on a fresh connection works
        assert source.count(source.table("amounts")) == fx.N_AMOUNTS
    finally:
        source.close()


def test_a_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ConfigError, match="statement timeout"):
        SqliteSource("sqlite://", statement_timeout_s=0)


# -- rows that cannot be built -------------------------------------------------------------------------


@pytest.mark.postgres
def test_unbuildable_rows_are_failures_in_both_postgres_builders(loaded_database: LoadedDatabase) -> None:
    """NaN and infinities (JSON has neither): reported with their id by both builders, not indexed as null
    (Python's orjson) or as the string "NaN" (PostgreSQL's JSON)."""
    if loaded_database.kind != "postgres":
        pytest.skip("NaN in a float column and range types are PostgreSQL's")
    source = opened("postgres", loaded_database.url, 60)
    try:
        with source.engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE odd (id text PRIMARY KEY, v float8, r int8range)"))
            conn.execute(
                sa.text(
                    "INSERT INTO odd VALUES ('ok', 1.5, NULL), ('nan', 'NaN', NULL), ('inf', 'Infinity', NULL), "
                    "('-inf', '-Infinity', NULL), ('range', 2, int8range(1, 5)), ('a|b', 214, NULL)"
                )
            )
        cfg = IndexConfig(alias="odd", table="odd")
        results = {}
        for builder in builders(source, cfg):
            page = builder.page(ALL, None, 100)
            assert page.rows == 6
            assert len(page.docs) + len(page.failures) == page.rows
            results[type(builder).__name__] = (
                sorted(d.id for d in page.docs),
                {f.doc_id: f.error_class for f in page.failures},
            )
            docs, failures, missing = builder.by_keys([("nan",), ("ok",), ("gone",)])
            assert ([d.id for d in docs], [f.doc_id for f in failures], missing) == (["ok"], ["nan"], ["gone"])
        non_finite = {"nan": "NonFinite", "inf": "NonFinite", "-inf": "NonFinite"}
        assert results == {
            "DocumentBuilder": (["a|b", "ok", "range"], non_finite),
            "JsonAggregationBuilder": (["a|b", "ok", "range"], non_finite),
        }
    finally:
        source.close()
