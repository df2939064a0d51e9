"""A row filter or a computed field the database cannot evaluate is a config error (issue 32):
``sparkindex check`` and ``sparkindex reindex`` exit 2 before any work starts, with a line that
names the config key (``indexes[0].where``, ``indexes[0].computed.<field>``,
``indexes[0].relations[0].where``) and quotes the database's own message; the plan resolved
without the preflight (``api.reindex(preflight=False)``) refuses the same way, before Spark.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkindex import api
from sparkindex.config.urls import normalize_url
from tests.e2e.shop import copy_shop, drop_database, fresh_database, make_shop
from tests.preflight.helpers import fail_lines, run_cli

ROOT = "    complexity: 3.0\n"
CATEGORY = "        table: categories\n"
AUTHOR = "            table: users\n"


def pipeline(
    directory: Path, anchor: str, key: str, value: str, server: tuple[str, str, list[tuple[str, str]]] | None = None
) -> Path:
    """The demo shop, its pipeline given ``key: value`` under the level whose line is *anchor*
    (*value* a YAML flow scalar or map). *server*: (kind, server URL, the list of databases made),
    the shop copied into a fresh database there (recorded in the list, to be dropped)."""
    make_shop(directory, 10, partition_size=10)
    config = directory / "pipeline.yaml"
    text = config.read_text(encoding="utf-8")
    assert anchor in text, anchor
    indent = anchor[: len(anchor) - len(anchor.lstrip())]
    text = text.replace(anchor, f"{anchor}{indent}{key}: {value}\n", 1)
    if server is not None:
        kind, server_url, made = server
        name = f"shpe_{uuid.uuid4().hex[:10]}"
        url = fresh_database(server_url, name)
        made.append((kind, name))
        copy_shop(directory / "shop.db", normalize_url(url))
        text = text.replace("url: sqlite:///shop.db", f"url: {url}")
    config.write_text(text, encoding="utf-8")
    return config


@pytest.fixture
def databases(services: dict[str, str]) -> Iterator[list[tuple[str, str]]]:
    """(kind, database name) of the server databases a test made: dropped afterwards."""
    made: list[tuple[str, str]] = []
    yield made
    for kind, name in made:
        drop_database(services[kind], name)


def assert_check_refuses(cli: Path, config: Path, key: str, message: str) -> str:
    """``sparkindex check``: exit 2, one FAIL line naming *key* and the database's *message*."""
    run = run_cli(cli, "check", "-c", str(config))
    assert run.returncode == 2, run.stdout + run.stderr[-3000:]
    failed = fail_lines(run.stdout)
    lines = [line for line in failed if f"indexes[0]{key}" in line]
    assert len(lines) == 1, failed
    [line] = lines
    assert f"indexes[0]{key}:" in line and message in line, line
    assert not (config.parent / ".sparkindex").exists() and not (config.parent / "index").exists(), (
        "check writes nothing"
    )
    return line


def assert_reindex_refuses(cli: Path, config: Path, line: str) -> None:
    """``sparkindex reindex``: exit 2 with the very line ``check`` printed, nothing started."""
    run = run_cli(cli, "reindex", "-c", str(config), "--json")
    assert run.returncode == 2, run.stderr[-3000:]
    assert line in run.stderr.splitlines(), run.stderr[-3000:]
    assert run.stdout.strip() == ""
    assert not (config.parent / ".sparkindex").exists() and not (config.parent / "index").exists(), "nothing started"


def assert_plan_refuses(config: Path, key: str, message: str) -> None:
    """The reindex's own plan, without the preflight: a ConfigError (exit 2), no index version."""
    with pytest.raises(api.ConfigError) as refused:
        api.reindex(config, preflight=False)
    text = str(refused.value)
    assert f"indexes[0]{key}:" in text and message in text, text
    assert not list((config.parent / "index").glob("products_v*")), "no version was created"


# -- unknown columns in a row filter --------------------------------------------------------------------
def test_unknown_column_in_where_on_sqlite(tmp_path: Path, cli: Path) -> None:
    where = json.dumps("no_such_col = 'O''Brien' AND stock > 0")
    config = pipeline(tmp_path, ROOT, "where", where)
    line = assert_check_refuses(cli, config, ".where", "no such column: no_such_col")
    assert_reindex_refuses(cli, config, line)
    assert_plan_refuses(config, ".where", "no such column: no_such_col")


@pytest.mark.postgres
def test_unknown_mixed_case_column_in_where_on_postgres(
    tmp_path: Path, cli: Path, services: dict[str, str], databases: list[tuple[str, str]]
) -> None:
    """``"Stock"`` (quoted, mixed case) is not ``stock``: PostgreSQL says which column it lacks."""
    server = ("postgres", services["postgres"], databases)
    config = pipeline(tmp_path, ROOT, "where", json.dumps('"Stock" > 0'), server)
    line = assert_check_refuses(cli, config, ".where", 'column "Stock" does not exist')
    assert_reindex_refuses(cli, config, line)
    assert_plan_refuses(config, ".where", 'column "Stock" does not exist')


# -- invalid SQL in a computed field ----------------------------------------------------------------------
@pytest.mark.mysql
def test_invalid_sql_in_computed_on_mariadb(
    tmp_path: Path, cli: Path, services: dict[str, str], databases: list[tuple[str, str]]
) -> None:
    value = '{ok: "stock * 2", bad_expr: "stock ** 2"}'
    config = pipeline(tmp_path, ROOT, "computed", value, ("mysql", services["mysql"], databases))
    line = assert_check_refuses(cli, config, ".computed.bad_expr", "You have an error in your SQL syntax")
    assert ".computed.ok" not in line
    assert_reindex_refuses(cli, config, line)
    assert_plan_refuses(config, ".computed.bad_expr", "You have an error in your SQL syntax")


# -- a relation's filter ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("anchor", "key", "where", "message"),
    [
        pytest.param(CATEGORY, ".relations[0].where", "no_such_col > 0", "no such column: no_such_col", id="object"),
        pytest.param(
            AUTHOR,
            ".relations[1].relations[0].where",
            "country = = 'DE'",
            'near "=": syntax error',
            id="nested-object",
        ),
    ],
)
def test_invalid_where_on_a_relation(
    tmp_path: Path, cli: Path, anchor: str, key: str, where: str, message: str
) -> None:
    config = pipeline(tmp_path, anchor, "where", json.dumps(where))
    line = assert_check_refuses(cli, config, key, message)
    assert "indexes[0].where" not in line
    assert_plan_refuses(config, key, message)
