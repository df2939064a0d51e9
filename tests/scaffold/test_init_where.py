"""``sparkindex init --where``: the filter lands on the one index it is for, and the database judges it.

Why: a filter is SQL in the source's dialect, so only the database can say it is valid; a typo
must stop init with the database's own words (exit 2, naming ``--where``) rather than be written
into a file that fails at the first reindex. And init may propose several indexes: a filter over
one table's columns must never be guessed onto another. SQLite, no Spark.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from sparkindex import api
from sparkindex.config.loader import parse_pipeline
from sparkindex.scaffold import InitOptions, scaffold
from tests.scaffold.test_init_cli import one_line_error, run


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Products (with a soft-delete column) referencing categories, and an unrelated second root."""
    folder = tmp_path_factory.mktemp("where")
    engine = sa.create_engine(f"sqlite:///{folder / 'shop.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.exec_driver_sql(
            "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, deleted_at TEXT, "
            "category_id INTEGER NOT NULL REFERENCES categories(id))"
        )
        conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.exec_driver_sql("INSERT INTO categories VALUES (1, 'tools')")
        conn.exec_driver_sql("INSERT INTO products VALUES (1, 'saw', 9.5, NULL, 1), (2, 'axe', 20, '2024-01-01', 1)")
        conn.exec_driver_sql("INSERT INTO notes VALUES (1, 'n')")
    engine.dispose()
    return folder


def _url(shop: Path) -> str:
    return f"sqlite:///{shop / 'shop.db'}"


def test_the_filter_is_written_on_the_named_index_and_loads(shop: Path) -> None:
    result = scaffold(
        InitOptions(_url(shop), shop / "p.yaml", ["products"], where="  deleted_at IS NULL AND price % 2 >= 0 ")
    )
    loaded = yaml.safe_load(result.text)
    [index] = loaded["indexes"]
    assert index["table"] == "products" and index["where"] == "deleted_at IS NULL AND price % 2 >= 0"
    assert "init --where" in result.text  # the choice is commented like every other
    pipeline = parse_pipeline(result.text, origin="p.yaml", base_dir=shop)
    assert pipeline.index("products").where == "deleted_at IS NULL AND price % 2 >= 0"


def test_text_with_yaml_and_bind_characters_survives(shop: Path) -> None:
    """Quotes, a colon (SQLAlchemy's bind mark), a hash (YAML's comment) and a leading quote."""
    expr = "'a: b' <> name AND name NOT LIKE '%#x' OR name = \"name\""
    result = api.init(_url(shop), ["products"], output=shop / "p.yaml", where=expr)
    assert yaml.safe_load(result.text)["indexes"][0]["where"] == expr


def test_the_only_root_needs_no_table(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE items (id INTEGER PRIMARY KEY, hidden INTEGER NOT NULL DEFAULT 0)")
    engine.dispose()
    result = api.init(f"sqlite:///{tmp_path / 'one.db'}", output=tmp_path / "p.yaml", where="hidden = 0")
    assert yaml.safe_load(result.text)["indexes"][0]["where"] == "hidden = 0"


def test_ambiguous_and_empty_filters_are_refused(shop: Path) -> None:
    with pytest.raises(api.UsageError, match=r"--where filters one table, and init chose 2 \(products, notes\)"):
        api.init(_url(shop), output=shop / "p.yaml", where="id > 0")
    with pytest.raises(api.UsageError, match=r"--table names 2 \(products, notes\)"):
        api.init(_url(shop), ["products", "notes"], output=shop / "p.yaml", where="id > 0")
    with pytest.raises(api.UsageError, match="--where: empty"):
        api.init(_url(shop), ["products"], output=shop / "p.yaml", where="  ")


def test_a_filter_the_database_refuses_is_exit_2_with_its_message(cli: Path, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    line = one_line_error(
        run(cli, "--source", _url(shop), "--table", "products", "--where", "deleted IS NULL", "-o", str(out))
    )
    assert "--where: the row filter 'deleted IS NULL'" in line and "'products'" in line
    assert "no such column: deleted" in line
    assert not out.exists()
    syntax = one_line_error(run(cli, "--source", _url(shop), "-t", "products", "--where", "id >", "-o", str(out)))
    assert "--where" in syntax and "syntax error" in syntax
    assert not out.exists()


def test_the_cli_writes_it_and_says_so(cli: Path, shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    done: subprocess.CompletedProcess[str] = run(
        cli, "--source", _url(shop), "-t", "products", "--where", "deleted_at IS NULL", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(out.read_text())["indexes"][0]["where"] == "deleted_at IS NULL"
    assert "rows filtered by: deleted_at IS NULL" in done.stderr


@pytest.mark.postgres
def test_postgres_judges_its_own_dialect(services: dict[str, str], tmp_path: Path) -> None:
    """A PostgreSQL-only operator passes; a wrong type is the server's message, one line."""
    url = sa.make_url(services["postgres"])
    name = "t_init_where"
    admin = sa.create_engine(url.set(drivername="postgresql+psycopg"))
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        conn.exec_driver_sql(f'CREATE TABLE "{name}".thing (id integer PRIMARY KEY, tags text[], label text)')
    try:
        source = url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
        result = api.init(source, ["thing"], output=tmp_path / "p.yaml", where="tags @> ARRAY['x'] AND id % 2 = 0")
        assert yaml.safe_load(result.text)["indexes"][0]["where"] == "tags @> ARRAY['x'] AND id % 2 = 0"
        with pytest.raises(api.UsageError, match=r"--where: .*operator does not exist: text ~~ integer") as info:
            api.init(source, ["thing"], output=tmp_path / "p.yaml", where="label LIKE 3")
        assert "\n" not in str(info.value)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        admin.dispose()
