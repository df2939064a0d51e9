"""External versions from a column (``indexes[].version``): the rule, the config errors, and both
builders on every dialect (real SQLite, PostgreSQL and MariaDB; nothing mocked)."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from tests.fresh_databases import DIALECTS, fresh_database

from sparkindex.config.indexes import IndexConfig
from sparkindex.documents import resolve_index
from sparkindex.documents.builder import DocumentBuilder, make_builder
from sparkindex.documents.versions import MAX_VERSION, external_version
from sparkindex.errors import ConfigError, DocumentError
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange, Source

UTC = dt.UTC
STAMP = dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
STAMP_MICROS = round(STAMP.replace(tzinfo=UTC).timestamp()) * 1_000_000 + 123456


# -- the rule ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "version"),
    [
        (0, 0),
        (7, 7),
        (MAX_VERSION, MAX_VERSION),
        (decimal.Decimal("42"), 42),
        (decimal.Decimal("42.000"), 42),
        (dt.datetime(1970, 1, 1), 0),
        (dt.datetime(1970, 1, 1, 0, 0, 0, 1), 1),
        (STAMP, STAMP_MICROS),
        (STAMP.replace(tzinfo=UTC), STAMP_MICROS),
        # the same instant written in another zone has the same version
        (dt.datetime(2024, 1, 2, 5, 4, 5, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2))), STAMP_MICROS),
        (dt.date(1970, 1, 2), 86_400_000_000),
    ],
)
def test_versions_follow_the_documented_rule(value: Any, version: int) -> None:
    assert external_version("d1", "v", value) == version


@pytest.mark.parametrize(
    ("value", "error_class", "words"),
    [
        (None, "NullVersion", "is NULL"),
        (-1, "BadVersion", "between 0 and"),
        (MAX_VERSION + 1, "BadVersion", "between 0 and"),
        (dt.datetime(1969, 12, 31, 23, 59, 59), "BadVersion", "since 1970-01-01 UTC"),
        (True, "BadVersion", "neither an integer nor a date/time"),
        ("12", "BadVersion", "neither an integer nor a date/time"),
        (1.5, "BadVersion", "neither an integer nor a date/time"),
        (decimal.Decimal("1.5"), "BadVersion", "neither an integer nor a date/time"),
        (decimal.Decimal("NaN"), "BadVersion", "neither an integer nor a date/time"),
    ],
)
def test_values_that_cannot_be_versions_are_document_errors(value: Any, error_class: str, words: str) -> None:
    err = external_version("a|b", "updated_at", value)
    assert isinstance(err, DocumentError)
    assert err.doc_id == "a|b" and err.error_class == error_class
    assert "'updated_at'" in err.reason and words in err.reason


# -- on every dialect ----------------------------------------------------------------------------------
def _precise(timezone: bool = False) -> Any:
    # MariaDB's DATETIME drops fractions of a second unless asked for six digits
    return sa.DateTime(timezone=timezone).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _load(engine: sa.Engine) -> None:
    meta = sa.MetaData()
    items = sa.Table(
        "Items",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text),
        sa.Column("rv", sa.BigInteger),
        sa.Column("updated_at", _precise()),
        sa.Column("changed_at", _precise(timezone=True)),
        sa.Column("day", sa.Date),
        sa.Column("big", sa.Numeric(20, 0)),
        sa.Column("price", sa.Numeric(10, 2)),
        sa.Column("ratio", sa.Float),
        sa.Column("flag", sa.Boolean),
        sa.Column("label", sa.String(20)),
    )
    meta.create_all(engine)
    aware = STAMP.replace(tzinfo=UTC)
    rows = [
        (1, "Mixed Case, punctuated; name", 5, STAMP, aware, dt.date(2024, 1, 2), 5, "1.50", 0.5, True, "a|b"),
        (2, None, None, None, None, None, None, None, None, None, None),
        (
            3,
            "epoch",
            0,
            dt.datetime(1970, 1, 1),
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.date(1970, 1, 1),
            0,
            "0",
            0,
            0,
            "",
        ),
        (4, "max", MAX_VERSION, STAMP, aware, dt.date(2024, 1, 2), 10**15 + 1, "2", 1, 1, "x"),
        (5, "negative", -1, dt.datetime(1969, 12, 31, 23, 59, 59), None, None, -1, "3", 2, 0, "y"),
    ]
    cols = [c.name for c in items.columns]
    with engine.begin() as conn:
        conn.execute(items.insert(), [dict(zip(cols, r, strict=True)) for r in rows])


@pytest.fixture(scope="module", params=DIALECTS)
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    kind = request.param
    folder = tmp_path_factory.mktemp(f"versions-{kind}")
    with fresh_database(kind, folder, lambda: request.getfixturevalue("services"), _load) as url:
        yield kind, url


@pytest.fixture
def source(database: tuple[str, str]) -> Iterator[Source]:
    s = open_source_url(database[1])
    yield s
    s.close()


def build(source: Source, build_mode: str = "python", **kw: Any) -> tuple[dict[str, Any], dict[str, DocumentError]]:
    cfg = IndexConfig(alias="items", table="Items", build=build_mode, **kw)  # type: ignore[arg-type]
    plan = resolve_index(source, cfg, "indexes[0]")
    builder = make_builder(source, plan) if build_mode != "python" else DocumentBuilder(source, plan)
    page = builder.page(KeyRange(None, None), None, 100)
    assert page.rows == 5 and len(page.docs) + len(page.failures) == 5
    return {d.id: d for d in page.docs}, {f.doc_id: f for f in page.failures}


def test_integer_column_versions(source: Source) -> None:
    docs, failures = build(source, version="rv")
    assert {k: d.version for k, d in docs.items()} == {"1": 5, "3": 0, "4": MAX_VERSION}
    assert {k: f.error_class for k, f in failures.items()} == {"2": "NullVersion", "5": "BadVersion"}
    assert "'rv'" in failures["2"].reason
    item = docs["4"].bulk_item()
    assert item.version == MAX_VERSION and item.id == "4" and item.source == docs["4"].source


@pytest.mark.parametrize("column", ["updated_at", "changed_at"])
def test_timestamp_versions_are_epoch_microseconds(source: Source, column: str) -> None:
    docs, failures = build(source, version=column)
    assert docs["1"].version == STAMP_MICROS
    assert docs["3"].version == 0
    assert failures["2"].error_class == "NullVersion"
    if column == "updated_at":
        assert failures["5"].error_class == "BadVersion"  # 1969: before the epoch
    else:
        assert failures["5"].error_class == "NullVersion"


def test_date_and_integral_numeric_versions(source: Source) -> None:
    docs, _ = build(source, version="day")
    assert docs["1"].version == STAMP_MICROS - (3 * 3600 + 4 * 60 + 5) * 1_000_000 - 123456
    docs, failures = build(source, version="big")
    # (not 2**63 - 1: SQLAlchemy reads SQLite NUMERIC through a float)
    assert docs["1"].version == 5 and docs["4"].version == 10**15 + 1
    assert failures["5"].error_class == "BadVersion"


def test_version_column_need_not_be_a_field(source: Source) -> None:
    docs, _ = build(source, version="rv", columns=["name"])
    assert orjson.loads(docs["1"].source) == {"name": "Mixed Case, punctuated; name"}
    assert docs["1"].version == 5


def test_no_version_column_no_versions(source: Source) -> None:
    docs, failures = build(source)
    assert failures == {} and {d.version for d in docs.values()} == {None}


@pytest.mark.parametrize(
    ("column", "shown"),
    [("name", "TEXT"), ("ratio", "FLOAT"), ("price", "NUMERIC(10, 2)"), ("label", "VARCHAR(20)"), ("flag", None)],
)
def test_a_column_that_cannot_hold_versions_is_refused(source: Source, column: str, shown: str | None) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_index(source, IndexConfig(alias="items", table="Items", version=column), "p.yaml: indexes[0]")
    msg = str(err.value)
    assert msg.startswith(f"p.yaml: indexes[0].version: column {column!r} of table 'Items' is ")
    assert "a version must be an integer or a date/time column" in msg
    if shown is not None and source.dialect_name == "sqlite":
        assert f" is {shown};" in msg


def test_a_missing_version_column_names_table_and_column(source: Source) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_index(source, IndexConfig(alias="items", table="Items", version="updatedAt"), "p.yaml: indexes[0]")
    msg = str(err.value)
    assert msg.startswith("p.yaml: indexes[0].version: column 'updatedAt' not found in table 'Items' (columns: id, ")


def test_both_builders_derive_the_same_versions(database: tuple[str, str], source: Source) -> None:
    if database[0] != "postgres":
        pytest.skip("documents are assembled in the database on PostgreSQL only")
    for column in ("rv", "updated_at", "changed_at", "day", "big"):
        py_docs, py_failures = build(source, "python", version=column)
        db_docs, db_failures = build(source, "database", version=column)
        assert {k: (d.version, d.hash) for k, d in db_docs.items()} == {
            k: (d.version, d.hash) for k, d in py_docs.items()
        }, column
        assert {k: (f.error_class, f.reason) for k, f in db_failures.items()} == {
            k: (f.error_class, f.reason) for k, f in py_failures.items()
        }, column


def test_text_stored_in_an_integer_column_is_a_document_error(tmp_path: Path) -> None:
    """SQLite keeps whatever a row holds, whatever the column's type says."""

    def load(engine: sa.Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (id TEXT PRIMARY KEY, rv INTEGER)")
            conn.exec_driver_sql("INSERT INTO t VALUES ('ok', 3), ('bad|one', 'soon'), ('half', 2.5)")

    with fresh_database("sqlite", tmp_path, dict, load) as url:
        source = open_source_url(url)
        try:
            plan = resolve_index(source, IndexConfig(alias="t", table="t", version="rv"), "indexes[0]")
            page = DocumentBuilder(source, plan).page(KeyRange(None, None), None, 10)
        finally:
            source.close()
    assert [(d.id, d.version) for d in page.docs] == [("ok", 3)]
    assert sorted((f.doc_id, f.error_class) for f in page.failures) == [
        ("bad|one", "BadVersion"),
        ("half", "BadVersion"),
    ]
    assert "'soon'" in next(f.reason for f in page.failures if f.doc_id == "bad|one")
