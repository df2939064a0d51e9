"""A key range's checksum computed by PostgreSQL (``database_checksum``) is the sum the workers
make of the same documents' checks: the same MD5 of the same canonical bytes, keyed the same way
by the plan's shape (a routing column), over hostile text under an ICU collation and nested
relations; and a range holding a value PostgreSQL cannot write canonically is left to the
workers (None), never summed wrong."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.checksums import RangeChecksum
from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder
from sparkindex.documents.in_database import JsonAggregationBuilder
from sparkindex.documents.plan import IndexPlan
from sparkindex.keys import sort_key
from sparkindex.sources.base import KeyRange
from sparkindex.sources.postgres import PostgresSource
from sparkindex.verify.range_checksums import source_checksum
from sparkindex.verify.range_task import TaskOptions
from tests.fresh_databases import fresh_database

pytestmark = pytest.mark.postgres

TEXTS = ['quote " back \\ ', "Øresund 東京 🎉 \u2028", "", "ÉCOLE école Ecole", "a|b\\N", None]


def _load(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                CREATE COLLATION IF NOT EXISTS und_icu (provider = icu, locale = 'und');
                CREATE TABLE items (id BIGINT PRIMARY KEY, label TEXT COLLATE und_icu, shop TEXT,
                  price DOUBLE PRECISION, at TIMESTAMP);
                CREATE TABLE notes (id INTEGER PRIMARY KEY, item BIGINT REFERENCES items(id), body TEXT);
                """
            )
        )
        conn.execute(
            sa.text("INSERT INTO items VALUES (:id, :label, :shop, :price, :at)"),
            [
                {
                    "id": i,
                    "label": TEXTS[i % len(TEXTS)],
                    "shop": f"s{i % 3}",
                    "price": [0.5, 12.25, -3.0, None][i % 4],
                    "at": ["2024-01-01 10:00:00.12", None][i % 2],
                }
                for i in range(1, 301)
            ],
        )
        conn.execute(
            sa.text("INSERT INTO notes VALUES (:id, :item, :body)"),
            [{"id": j, "item": 1 + j % 300, "body": TEXTS[j % len(TEXTS)]} for j in range(700) if j % 7],
        )


@pytest.fixture(scope="module")
def source(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresSource]:
    with fresh_database("postgres", tmp_path_factory.mktemp("checksum"), lambda: services, _load) as url:
        src = PostgresSource(url)
        try:
            yield src
        finally:
            src.close()


def _plan(source: PostgresSource, routing: str | None = None) -> IndexPlan:
    config = IndexConfig(
        alias="items",
        table="items",
        id=["id"],
        routing=routing,
        relations=[
            RelationConfig(name="notes", type="nested", table="notes", local_key=["id"], remote_key=["item"]),
        ],
    )
    return resolve_index(source, config, "indexes[0]")


def _python_sum(builder: DocumentBuilder, rng: KeyRange) -> RangeChecksum:
    page = builder.page(rng, None, 10_000)
    assert not page.failures
    return RangeChecksum.of_checks([d.check for d in page.docs if d.check is not None])


@pytest.mark.parametrize("routing", [None, "shop"])
@pytest.mark.parametrize("bounds", [(None, None), ((17,), (230,)), ((299,), None), ((400,), None)])
def test_the_database_sums_what_the_workers_sum(
    source: PostgresSource, routing: str | None, bounds: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
) -> None:
    plan = _plan(source, routing)
    builder = JsonAggregationBuilder(source, plan)
    assert builder.writes_canonical
    rng = KeyRange(*bounds)
    in_database = builder.database_checksum(rng)
    assert in_database is not None
    assert in_database == _python_sum(builder, rng)
    if bounds == (None, None):
        assert in_database.count == 300


def test_a_routing_column_keys_the_checks(source: PostgresSource) -> None:
    rng = KeyRange(None, None)
    plain = JsonAggregationBuilder(source, _plan(source)).database_checksum(rng)
    routed = JsonAggregationBuilder(source, _plan(source, "shop")).database_checksum(rng)
    assert plain is not None and routed is not None
    assert plain.count == routed.count and (plain.hi, plain.lo) != (routed.hi, routed.lo)


def test_a_range_with_a_value_only_python_writes_canonically_is_left_to_the_workers(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("UPDATE items SET price = 1e-7 WHERE id = 42"))
    try:
        builder = JsonAggregationBuilder(source, _plan(source))
        assert builder.database_checksum(KeyRange((40,), (50,))) is None
        assert builder.database_checksum(KeyRange((42,), (50,))) is not None  # the range after it: summed
    finally:
        with source.engine.begin() as conn:
            conn.execute(sa.text("UPDATE items SET price = 0.5 WHERE id = 42"))


@pytest.mark.parametrize("routing", [None, "shop"])
def test_each_rows_check_is_its_documents(source: PostgresSource, routing: str | None) -> None:
    """Key by key (how a range that differs is compared): the server's check of each row is the
    check of the document the builder makes of it."""
    builder = JsonAggregationBuilder(source, _plan(source, routing))
    rng = KeyRange((17,), (230,))
    rows = builder.database_checks(rng)
    assert rows is not None and len(rows) == 213
    built = {d.sort_key: d.check for d in builder.page(rng, None, 10_000).docs}
    assert {sort_key(key): check for key, check in rows} == built
    assert all(isinstance(key[0], int) for key, _ in rows)


def test_a_row_only_python_writes_canonically_has_no_server_check(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("UPDATE items SET price = 1e-7 WHERE id = 42"))
    try:
        rows = JsonAggregationBuilder(source, _plan(source)).database_checks(KeyRange((40,), (44,)))
        assert rows is not None
        assert {key[0]: check is None for key, check in rows} == {41: False, 42: True, 43: False, 44: False}
    finally:
        with source.engine.begin() as conn:
            conn.execute(sa.text("UPDATE items SET price = 0.5 WHERE id = 42"))


@pytest.mark.parametrize("repairing", [False, True], ids=["verify", "repair"])
def test_a_range_is_built_by_the_server_once_for_its_figure(source: PostgresSource, repairing: bool) -> None:
    """A verify asks for the sum alone (a number crosses the wire); a repair, which expects drift,
    asks for each row's check and sums them in the task, so a range that then differs is
    compared key by key without the server building its documents a second time."""
    builder = JsonAggregationBuilder(source, _plan(source))
    rng = KeyRange((17,), (230,))
    hashed: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "md5(" in statement:
            hashed.append(statement)

    sa.event.listen(source.engine, "before_cursor_execute", count)
    try:
        side = source_checksum(builder, rng, TaskOptions(repair=repairing))
    finally:
        sa.event.remove(source.engine, "before_cursor_execute", count)
    assert len(hashed) == 1, hashed
    assert side.figure == builder.database_checksum(rng) == _python_sum(builder, rng)
    assert side.built is None
    if repairing:
        assert side.checks is not None and len(side.checks) == 213
    else:
        assert side.checks is None


def test_a_repairs_range_with_a_row_only_python_writes_has_no_figure_but_its_checks(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("UPDATE items SET price = 1e-7 WHERE id = 42"))
    try:
        side = source_checksum(
            JsonAggregationBuilder(source, _plan(source)), KeyRange((40,), (44,)), TaskOptions(repair=True)
        )
        assert side.figure is None and side.checks is not None
        assert {key[0]: check is None for key, check in side.checks} == {41: False, 42: True, 43: False, 44: False}
    finally:
        with source.engine.begin() as conn:
            conn.execute(sa.text("UPDATE items SET price = 0.5 WHERE id = 42"))
