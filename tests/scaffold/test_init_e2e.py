"""``init`` -> ``reindex`` -> ``verify`` through the real CLI, with no hand edits, on a schema nobody
tuned for it (TPC-H with composite keys, a link table, a self-reference and a cycle, a table keyed
by a unique key, a table without a key), on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
import yaml

from tests.fresh_databases import DIALECTS, fresh_database
from tests.scaffold.extras import load_rich_schema
from tests.scaffold.odd_types import load_odd_types

pytestmark = pytest.mark.slow

#: the roots init chooses by default (their aliases), and their tables
ROOTS = {"lineitem": "lineitem", "gadget": "Gadget", "employee": "employee", "book": "book", "author": "author",
         "currency": "currency"}  # fmt: skip


def sparkindex(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=900)


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return body


@pytest.mark.parametrize("kind", DIALECTS)
def test_init_then_reindex_then_verify_is_clean(
    kind: str, tmp_path: Path, cli: Path, request: pytest.FixtureRequest
) -> None:
    counts: dict[str, int] = {}

    def load(engine: Any) -> None:
        counts.update(load_rich_schema(engine))
        counts["Gadget"] = load_odd_types(engine)

    servers: Callable[[], dict[str, str]] = lambda: request.getfixturevalue("services")  # noqa: E731
    with fresh_database(kind, tmp_path, servers, load) as url:
        folder = tmp_path / "pipeline"
        folder.mkdir()
        config = folder / "pipeline.yaml"
        done = sparkindex(cli, "init", "--source", url, "-o", str(config))
        assert done.returncode == 0, done.stderr
        text = config.read_text()
        raw = yaml.safe_load(text)
        assert [i["alias"] for i in raw["indexes"]] == list(ROOTS)
        expected = {alias: counts[table] for alias, table in ROOTS.items()}
        # change capture as the server allows it: MariaDB's binlog (the test server has it);
        # PostgreSQL's logical decoding needs REPLICA IDENTITY FULL on the nested tables first,
        # so the section is proposed in comments with the statements; SQLite has no log
        if kind == "mysql":
            assert raw["sync"] == {"source": "log"}
        else:
            assert "sync" not in raw
        if kind == "postgres":
            assert "REPLICA IDENTITY FULL" in text and "# sync:" in text

        reindex = sparkindex(cli, "reindex", "-c", str(config), "--json")
        assert reindex.returncode == 0, reindex.stderr[-3000:]
        summary = last_json(reindex)
        assert summary["status"] == "COMPLETED" and summary["failed"] == 0
        assert summary["indexed"] == summary["source_rows"] == sum(expected.values())

        verify = sparkindex(cli, "verify", "-c", str(config), "--json")
        assert verify.returncode == 0, verify.stderr[-3000:]
        report = last_json(verify)
        assert {k: report[k] for k in ("missing", "extra", "stale", "duplicates")} == dict.fromkeys(
            ("missing", "extra", "stale", "duplicates"), 0
        )
        assert report["checked"] == sum(expected.values())
        assert {alias: r["index_docs"] for alias, r in report["aliases"].items()} == expected


def test_proposed_polling_captures_changes(tmp_path: Path, cli: Path) -> None:
    """Every table has a change column: init proposes polling, and the pipeline as written
    reindexes, then follows an update and a new child row with `sync`, and verifies clean."""
    db = tmp_path / "shop.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        for ddl in (
            "CREATE TABLE category (id INTEGER PRIMARY KEY, name TEXT NOT NULL, updated_at DATETIME NOT NULL)",
            "CREATE TABLE product (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category_id INTEGER NOT NULL"
            " REFERENCES category(id), updated_at DATETIME NOT NULL)",
            "CREATE TABLE review (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES product(id),"
            " body TEXT, modified_at DATETIME NOT NULL)",
        ):
            conn.exec_driver_sql(ddl)
        stamp = "2026-01-01 00:00:00"
        for i, name in ((1, "Lamps|Light"), (2, "Desks: wood")):
            conn.exec_driver_sql(f"INSERT INTO category VALUES ({i}, '{name}', '{stamp}')")
        for i in range(1, 31):
            conn.exec_driver_sql(f"INSERT INTO product VALUES ({i}, 'item, no. {i}', {1 + i % 2}, '{stamp}')")
            conn.exec_driver_sql(f"INSERT INTO review VALUES ({i}, {i}, 'fine ''{i}''', '{stamp}')")
    config = tmp_path / "pipeline.yaml"
    done = sparkindex(cli, "init", "--source", f"sqlite:///{db}", "-o", str(config))
    assert done.returncode == 0, done.stderr
    raw = yaml.safe_load(config.read_text())
    assert raw["sync"] == {"source": "polling"}
    [review] = raw["indexes"]  # the only root: it references product NOT NULL, which references category
    assert review["alias"] == "review" and review["changes"]["column"] == "modified_at"

    reindex = sparkindex(cli, "reindex", "-c", str(config), "--json")
    assert reindex.returncode == 0, reindex.stderr[-3000:]
    assert last_json(reindex)["indexed"] == 30

    later = "2026-01-02 00:00:00"
    with engine.begin() as conn:  # a parent row changes (fans out to its reviews) and a review is added
        conn.exec_driver_sql(f"UPDATE category SET name = 'Lamps: renamed', updated_at = '{later}' WHERE id = 1")
        conn.exec_driver_sql(f"INSERT INTO review VALUES (31, 2, 'new, with | pipe', '{later}')")
    engine.dispose()
    sync = sparkindex(cli, "sync", "-c", str(config), "--until-caught-up", "--json")
    assert sync.returncode == 0, sync.stderr[-3000:]
    assert last_json(sync)["applied"] >= 16  # the new review and the 15 reviews under category 1

    verify = sparkindex(cli, "verify", "-c", str(config), "--json")
    assert verify.returncode == 0, verify.stderr[-3000:]
    report = last_json(verify)
    assert (report["missing"], report["extra"], report["stale"], report["index_docs"]) == (0, 0, 0, 31)
