"""Computed fields are typed by the database and refused where no per-row field fits: an
aggregate (one value for a whole table), a result type with no field type, invalid SQL. Checked
on the three databases, with no Spark: this is plan-time work."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.errors import ConfigError
from sparkindex.resources import open_source_url
from sparkindex.sources.base import Source
from sparkindex.sources.expressions import check_filter, expression_type
from tests.e2e.shop import copy_shop, drop_database, fresh_database, make_shop

KEY = "p.yaml: indexes[0].computed.f"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Source]]:
    kind = request.param
    make_shop(tmp_path, 20, partition_size=10)
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    name = f"expr_{uuid.uuid4().hex[:10]}"
    if kind != "sqlite":
        server = request.getfixturevalue("services")[kind]
        url = fresh_database(server, name)
        copy_shop(tmp_path / "shop.db", url)
    source = open_source_url(url)
    try:
        yield kind, source
    finally:
        source.close()
        if kind != "sqlite":
            drop_database(request.getfixturevalue("services")[kind], name)


def _type(source: Source, fragment: str) -> sa.types.TypeEngine[object]:
    return expression_type(source, source.table("products"), fragment, KEY)


def test_results_are_typed_by_the_database(shop: tuple[str, Source]) -> None:
    kind, source = shop
    assert isinstance(_type(source, "stock * 2"), sa.Integer)
    assert isinstance(
        _type(source, "CAST(stock AS DOUBLE PRECISION)" if kind == "postgres" else "price * 2"), sa.Float | sa.Numeric
    )
    text = _type(source, "CONCAT(name, '!')" if kind == "mysql" else "name || '!'")
    assert isinstance(text, sa.String)


def test_an_aggregate_is_refused(shop: tuple[str, Source]) -> None:
    _, source = shop
    with pytest.raises(ConfigError, match=r"computed\.f: the expression 'max\(price\)' aggregates the rows"):
        _type(source, "max(price)")


def test_a_result_no_field_type_fits_is_refused_with_a_cast_to_write(shop: tuple[str, Source]) -> None:
    kind, source = shop
    fragment = {"postgres": "created_at - created_at", "mysql": "TIME('10:00:00')", "sqlite": "CAST(name AS BLOB)"}[
        kind
    ]
    with pytest.raises(ConfigError, match=r"computed\.f: .* which no field type fits; CAST it"):
        _type(source, fragment)


def test_a_bad_filter_names_its_key_and_the_database_message(shop: tuple[str, Source]) -> None:
    _, source = shop
    with pytest.raises(ConfigError, match=r"indexes\[0\]\.where: the row filter 'nope > 1' is not valid SQL"):
        check_filter(source, source.table("products"), "nope > 1", "p.yaml: indexes[0].where")
    check_filter(source, source.table("products"), "name LIKE '%a:b%'", "p.yaml: indexes[0].where")  # % and : as text


def test_sqlite_types_what_it_can_from_the_sql_not_the_data(tmp_path: Path) -> None:
    make_shop(tmp_path, 5, partition_size=10)
    with open_source_url(f"sqlite:///{tmp_path / 'shop.db'}") as source:
        source.engine.dispose()
        with source.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM reviews"))
            conn.execute(sa.text("DELETE FROM products"))
        assert isinstance(_type(source, "CAST(stock * 2 AS INTEGER)"), sa.Integer)  # the CAST, on no rows
        assert isinstance(_type(source, "CAST(price AS REAL)"), sa.Float)
        assert isinstance(_type(source, "stock"), sa.Integer)  # a column: its declared type
        assert isinstance(_type(source, "stock + 1"), sa.Text)  # no value to read it from: text


def test_a_window_function_is_refused_as_depending_on_other_rows(shop: tuple[str, Source]) -> None:
    _, source = shop
    with pytest.raises(ConfigError, match=r"computed\.f: the expression .* depends on other rows of table 'products'"):
        _type(source, "stock - avg(stock) OVER ()")


def test_sqlite_takes_a_cast_only_when_it_is_the_whole_expression(tmp_path: Path) -> None:
    make_shop(tmp_path, 5, partition_size=10)
    with open_source_url(f"sqlite:///{tmp_path / 'shop.db'}") as source:
        # starts with a CAST and ends with AS INTEGER), but is a text concatenation
        assert isinstance(_type(source, "CAST(name AS TEXT) || CAST(stock AS INTEGER)"), sa.Text)
        assert isinstance(_type(source, "CAST((stock + 1) AS INTEGER)"), sa.Integer)
        assert isinstance(_type(source, "CAST(name || ')' AS TEXT)"), sa.Text)
