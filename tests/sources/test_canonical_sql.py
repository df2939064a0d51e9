"""The server-written canonical JSON (documents/canonical_sql.py) is byte for byte what the
decoding path makes of the same rows, on values chosen to break it: every class of float
(zeros of both signs, the edges of PostgreSQL's fixed notation, NaN and infinities), reals,
numerics, text with every escape and mixed scripts, times with and without zones, nested
objects and lists (empty, NULL, with their own floats), and keys of type text beside the
document (the cursor loads text as bytes for the document only)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from sparkindex.config.indexes import IndexConfig, RelationConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import BuiltDocument
from sparkindex.documents.floats import restore_floats
from sparkindex.documents.hashing import dumps_document
from sparkindex.documents.in_database import JsonAggregationBuilder
from sparkindex.documents.plan import IndexPlan
from sparkindex.errors import DocumentError
from sparkindex.sources.base import KeyRange
from sparkindex.sources.postgres import PostgresSource
from tests.fresh_databases import fresh_database

pytestmark = pytest.mark.postgres

FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    214.0,
    0.1,
    0.1 + 0.2,
    1e-4,
    9.99e-5,
    1e-5,
    0.0001234,
    123456789012345.0,
    999999999999999.9,
    1e15,
    1e15 + 2,
    1e16,
    1e300,
    5e-324,
    -2.5e-7,
    math.pi,
    -math.e,
    None,
]
REALS = [0.0, 3.7, 123456.0, 999999.9, 1e6, 1234567.0, 1e-5, 0.0001, -0.0, 1.1754944e-38, None]
NUMERICS = ["12.50", "12", "-0", "0.1000000000000000055511151231257827", "1e20", "123456789012345678", "0.00001", None]
TEXTS = [
    'quote " backslash \\ slash / ',
    "controls \x01\x08\x09\x0a\x0c\x0d\x1f del \x7f",
    "Øresund Kraków 東京 القاهرة मुंबई 서울 🎉 \u2028 \u2029",
    "",
    "   padded   ",
    None,
]


def _load(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                CREATE TABLE owners (name TEXT PRIMARY KEY, since TIMESTAMPTZ, weight REAL);
                CREATE TABLE items (
                  key TEXT PRIMARY KEY, owner TEXT REFERENCES owners(name), n BIGINT, small SMALLINT,
                  flag BOOLEAN, x DOUBLE PRECISION, r REAL, d NUMERIC, label TEXT, code VARCHAR(8),
                  fixed CHAR(4), at TIMESTAMP, at_tz TIMESTAMPTZ, day DATE, clock TIME, uid UUID);
                CREATE TABLE notes (id INTEGER PRIMARY KEY, item TEXT REFERENCES items(key), body TEXT,
                  score DOUBLE PRECISION);
                """
            )
        )
        conn.execute(
            sa.text("INSERT INTO owners VALUES ('Ada', '2024-02-29 23:59:59.5+05:30', 0.1), ('bob', NULL, NULL)")
        )
        rows = []
        for i in range(max(len(FLOATS), len(REALS), len(NUMERICS), len(TEXTS))):
            rows.append(
                {
                    "key": f"K|{i}\\ é",
                    "owner": ["Ada", "bob", None][i % 3],
                    "n": [0, -(2**63), 2**63 - 1, 42][i % 4],
                    "small": [None, -32768, 7][i % 3],
                    "flag": [True, False, None][i % 3],
                    "x": FLOATS[i % len(FLOATS)],
                    "r": REALS[i % len(REALS)],
                    "d": NUMERICS[i % len(NUMERICS)],
                    "label": TEXTS[i % len(TEXTS)],
                    "code": ["ab", "", None][i % 3],
                    "fixed": ["ab", None][i % 2],
                    "at": ["2024-01-01 10:00:00", "2024-01-01 10:00:00.120", "1999-12-31 23:59:59.999999", None][i % 4],
                    "at_tz": ["2024-06-01 12:00:00.5+02", None][i % 2],
                    "day": ["2024-02-29", None][i % 2],
                    "clock": ["13:45:00.25", None][i % 2],
                    "uid": ["0b7e5f3c-6d2a-4c8e-9f31-2a4b6c8d0e1f", None][i % 2],
                }
            )
        conn.execute(
            sa.text(
                "INSERT INTO items VALUES (:key, :owner, :n, :small, :flag, :x, :r, CAST(:d AS NUMERIC), :label, "
                ":code, :fixed, :at, :at_tz, :day, :clock, :uid)"
            ),
            rows,
        )
        notes = [
            {
                "id": j,
                "item": rows[j % len(rows)]["key"],
                "body": TEXTS[j % len(TEXTS)],
                "score": FLOATS[j % len(FLOATS)],
            }
            for j in range(3 * len(rows))
            if j % 5 != 0  # some items have no notes: an empty list
        ]
        conn.execute(sa.text("INSERT INTO notes VALUES (:id, :item, :body, :score)"), notes)


@pytest.fixture(scope="module")
def source(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresSource]:
    with fresh_database("postgres", tmp_path_factory.mktemp("canonical"), lambda: services, _load) as url:
        src = PostgresSource(url)
        try:
            yield src
        finally:
            src.close()


def _plan(source: PostgresSource) -> IndexPlan:
    config = IndexConfig(
        alias="items",
        table="items",
        id=["key"],
        relations=[
            RelationConfig(name="owned_by", type="object", table="owners", local_key=["owner"], remote_key=["name"]),
            RelationConfig(
                name="notes", type="nested", table="notes", local_key=["key"], remote_key=["item"], order_by=["id"]
            ),
        ],
    )
    return resolve_index(source, config, "indexes[0]")


def _all(builder: JsonAggregationBuilder) -> tuple[list[BuiltDocument], list[DocumentError]]:
    page = builder.page(KeyRange(None, None), None, 1000)
    return page.docs, page.failures


def test_the_server_writes_what_the_decoding_path_makes(source: PostgresSource) -> None:
    plan = _plan(source)
    fast = JsonAggregationBuilder(source, plan)
    slow = JsonAggregationBuilder(source, plan, server_canonical=False)
    assert fast.writes_canonical and not slow.writes_canonical
    fast_docs, fast_failures = _all(fast)
    slow_docs, slow_failures = _all(slow)
    assert [d.id for d in fast_docs] == [d.id for d in slow_docs]
    assert len(fast_docs) > 10
    for f, s in zip(fast_docs, slow_docs, strict=True):
        assert f.source == s.source, f.id
        assert f.hash == s.hash, f.id
        assert f.sort_key == s.sort_key
        body = orjson.loads(f.source)
        restore_floats(body, fast._floats)
        assert dumps_document(body) == f.source  # canonical: a fixed point of the decoding path
    # NaN and infinities take the decoding path, which reports them (and nothing else fails)
    assert [(e.doc_id, e.error_class) for e in fast_failures] == [(e.doc_id, e.error_class) for e in slow_failures]


def test_non_finite_values_are_reported_not_written(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("UPDATE items SET x = 'NaN' WHERE key = :k"), {"k": "K|0\\ é"})
        conn.execute(sa.text("UPDATE notes SET score = '-Infinity' WHERE item = :k"), {"k": "K|1\\ é"})
        conn.execute(sa.text("UPDATE items SET d = 'NaN' WHERE key = :k"), {"k": "K|2\\ é"})
    try:
        docs, failures = _all(JsonAggregationBuilder(source, _plan(source)))
        assert {e.doc_id: e.error_class for e in failures} == {
            "K|0\\ é": "NonFinite",
            "K|1\\ é": "NonFinite",
            "K|2\\ é": "NonFinite",
        }
        assert not {"K|0\\ é", "K|1\\ é", "K|2\\ é"} & {d.id for d in docs}
    finally:
        with source.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE items SET x = 0.5, d = 1 WHERE key IN (:a, :c)"), {"a": "K|0\\ é", "c": "K|2\\ é"}
            )
            conn.execute(sa.text("UPDATE notes SET score = 1.5 WHERE item = :k"), {"k": "K|1\\ é"})


def test_text_keys_stay_text_beside_a_document_loaded_as_bytes(source: PostgresSource) -> None:
    docs, _ = _all(JsonAggregationBuilder(source, _plan(source)))
    assert all(isinstance(d.id, str) and d.id.startswith("K|") for d in docs)
    assert all(isinstance(d.source, bytes) for d in docs)
    by_key = JsonAggregationBuilder(source, _plan(source)).by_keys([("K|3\\ é",)])
    assert [d.id for d in by_key[0]] == ["K|3\\ é"]


def test_a_key_of_a_domain_over_text_stays_text(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("CREATE DOMAIN handle AS TEXT CHECK (VALUE <> '')"))
        conn.execute(sa.text("CREATE TABLE handles (h handle PRIMARY KEY, note TEXT, at TEXT)"))
        conn.execute(sa.text("INSERT INTO handles VALUES ('Zoë|1', 'x', '1'), ('a\\b', NULL, '2')"))
    plan = resolve_index(source, IndexConfig(alias="handles", table="handles", id=["h"]), "indexes[0]")
    builder = JsonAggregationBuilder(source, plan)
    assert builder.writes_canonical
    docs, failures = _all(builder)
    assert not failures
    assert sorted(d.id for d in docs) == sorted(["Zoë|1", "a\\b"])
    assert {d.id: d.source for d in docs}["Zoë|1"] == b'{"at":"1","h":"Zo\xc3\xab|1","note":"x"}'


def test_a_type_outside_the_rules_keeps_the_decoding_path(source: PostgresSource, tmp_path: Path) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE extras (id INTEGER PRIMARY KEY, meta JSONB, tags TEXT[])"))
        conn.execute(sa.text("""INSERT INTO extras VALUES (1, '{"b": 1, "a": [1.5, "x"]}', '{x,y}')"""))
    plan = resolve_index(source, IndexConfig(alias="extras", table="extras", id=["id"]), "indexes[0]")
    builder = JsonAggregationBuilder(source, plan)
    assert not builder.writes_canonical
    docs, failures = _all(builder)
    assert not failures
    assert docs[0].source == b'{"id":1,"meta":{"a":[1.5,"x"],"b":1},"tags":["x","y"]}'


def _same_on_both_paths(source: PostgresSource, plan: IndexPlan) -> tuple[list[BuiltDocument], list[DocumentError]]:
    fast = JsonAggregationBuilder(source, plan)
    assert fast.writes_canonical
    docs, failures = _all(fast)
    slow_docs, slow_failures = _all(JsonAggregationBuilder(source, plan, server_canonical=False))
    assert [(d.id, d.source, d.hash) for d in docs] == [(d.id, d.source, d.hash) for d in slow_docs]
    assert [(e.doc_id, e.error_class) for e in failures] == [(e.doc_id, e.error_class) for e in slow_failures]
    return docs, failures


def test_numerics_a_double_cannot_hold_take_the_decoding_path(source: PostgresSource) -> None:
    values = ["1.5", "1e400", "1e-400", "-2e308", "999999999999999.99", "0.00001", "-0", "NaN", "Infinity", None]
    with source.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE wide (id INTEGER PRIMARY KEY, d NUMERIC)"))
        conn.execute(
            sa.text("INSERT INTO wide VALUES (:id, CAST(:d AS NUMERIC))"),
            [{"id": i, "d": v} for i, v in enumerate(values)],
        )
    plan = resolve_index(source, IndexConfig(alias="wide", table="wide", id=["id"]), "indexes[0]")
    docs, failures = _same_on_both_paths(source, plan)  # the page is read: no row fails the statement
    by_id = {d.id: d.source for d in docs}
    assert by_id["0"] == b'{"d":1.5,"id":0}'
    assert by_id["6"] == b'{"d":0.0,"id":6}'
    assert {e.doc_id for e in failures} >= {"7", "8"}  # NaN and infinity are reported, never written


def test_domains_over_floats_are_floats_on_both_paths(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("CREATE DOMAIN dfloat AS DOUBLE PRECISION"))
        conn.execute(sa.text("CREATE DOMAIN dnum AS NUMERIC"))
        conn.execute(sa.text("CREATE TABLE doms (id INTEGER PRIMARY KEY, x dfloat, y dnum)"))
        conn.execute(sa.text("INSERT INTO doms VALUES (1, 214, 12), (2, '-0', '-0'), (3, 'NaN', 1), (4, 1.25, 'NaN')"))
    plan = resolve_index(source, IndexConfig(alias="doms", table="doms", id=["id"]), "indexes[0]")
    docs, failures = _same_on_both_paths(source, plan)
    assert {d.id: d.source for d in docs} == {
        "1": b'{"id":1,"x":214.0,"y":12.0}',
        "2": b'{"id":2,"x":0.0,"y":0.0}',
    }
    assert sorted((e.doc_id, e.error_class) for e in failures) == [("3", "NonFinite"), ("4", "NonFinite")]


def test_a_document_without_fields_is_an_empty_object(source: PostgresSource) -> None:
    with source.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE bare (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(sa.text("INSERT INTO bare VALUES (1, 2)"))
    plan = resolve_index(source, IndexConfig(alias="bare", table="bare", id=["id"], columns=[]), "indexes[0]")
    docs, _ = _same_on_both_paths(source, plan)
    assert [(d.id, d.source) for d in docs] == [("1", b"{}")]


@pytest.mark.parametrize("how", ["options", "query", "environment"])
def test_documents_are_utf8_whatever_client_encoding_is_asked(
    source: PostgresSource, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sa.make_url(source.url)
    options = url.query["options"]
    if how == "options":
        url = url.update_query_dict({"options": f"{options} -cclient_encoding=LATIN1"})
    elif how == "query":
        url = url.update_query_dict({"client_encoding": "LATIN1"})
    else:
        monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    other = PostgresSource(url.render_as_string(False))
    try:
        with other.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM owners WHERE name = 'Øresund é'"))
            conn.execute(sa.text("INSERT INTO owners VALUES ('Øresund é', NULL, NULL)"))
        plan = resolve_index(other, IndexConfig(alias="owners", table="owners", id=["name"]), "indexes[0]")
        docs, _ = _same_on_both_paths(other, plan)
        assert b'"name":"\xc3\x98resund \xc3\xa9"' in {d.id: d.source for d in docs}["Øresund é"]
    finally:
        other.close()


def test_a_server_before_postgresql_12_keeps_the_decoding_path(source: PostgresSource) -> None:
    """PostgreSQL 11 wrote floats with %.16g, not their shortest digits (it cannot run here; its
    version number, as the dialect read it, stands in for it)."""
    plan = _plan(source)
    expected, _ = _all(JsonAggregationBuilder(source, plan, server_canonical=False))
    dialect = source.engine.dialect
    real = dialect.server_version_info
    dialect.server_version_info = (11, 22)
    try:
        builder = JsonAggregationBuilder(source, plan)
        docs, _ = _all(builder)
        assert not builder.writes_canonical
    finally:
        dialect.server_version_info = real
    assert [(d.id, d.source) for d in docs] == [(d.id, d.source) for d in expected]
