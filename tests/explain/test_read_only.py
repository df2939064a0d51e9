"""``explain`` writes nothing anywhere: no coordination store (not even its file), no index, no
folder, no row; and what it cannot explain it names, with exit 2.

Why: explain is what a user runs first, against a production database and before anything was
ever set up; it must be safe to run there. Its errors are the first ones a user meets.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from tests.e2e.shop import make_shop
from tests.explain.helpers import explain_json, run_cli, tree


def test_a_fresh_pipeline_stays_as_it_was(tmp_path: Path, cli: Path) -> None:
    """Before any reindex: the SQLite store's file and the Tantivy index folder are not created."""
    make_shop(tmp_path, products=300, partition_size=100)
    before = tree(tmp_path)
    body = explain_json(cli, tmp_path / "pipeline.yaml")
    assert body["id"] == "1" and body["document"]["id"] == 1
    assert tree(tmp_path) == before
    assert not (tmp_path / ".sparkindex").exists() and not (tmp_path / "index").exists()
    human = run_cli(cli, "explain", "-c", str(tmp_path / "pipeline.yaml"), "--id", "42")
    assert human.returncode == 0, human.stderr
    assert '"id": 42' in human.stdout and "── partitions: 3 for 300 rows" in human.stdout
    assert tree(tmp_path) == before


def test_the_parts_of_the_json_object(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, products=300, partition_size=100)
    body = explain_json(cli, tmp_path / "pipeline.yaml", "--id", "250")
    assert body["table"] == "products" and body["id_columns"] == ["id"] and body["source"] == "sqlite:///shop.db"
    assert body["document"]["id"] == 250 and len(body["document"]["reviews"]) >= 1
    props = body["mapping"]["properties"]
    # inferred from the schema, with the pipeline's overrides merged in
    assert props["reviews"]["type"] == "nested" and props["category"]["type"] == "object"
    assert props["name"]["analyzer"] == "english" and props["name"]["copy_to"] == ["all_text"]
    assert props["all_text"] == {"type": "text"}
    plan = body["partitions"]
    assert plan["count"] == 3 and plan["source_rows"] == 300 and plan["complexity"] == 3.0
    assert plan["counted"] and sorted(p["rows"] for p in plan["largest"]) == [100, 100, 100]
    assert [p["after"] for p in sorted(plan["largest"], key=lambda p: p["index"])] == [None, "100", "200"]


@pytest.mark.postgres
def test_a_server_store_gets_no_table_and_no_row(tmp_path: Path, cli: Path, services: dict[str, str]) -> None:
    """A coordination store on PostgreSQL: explain creates none of its tables (it never connects)."""
    make_shop(tmp_path, products=200, partition_size=100)
    prefix = f"x{uuid.uuid4().hex[:8]}_"
    config = tmp_path / "pipeline.yaml"
    text = config.read_text().replace("url: sqlite:///.sparkindex/state.db", f"url: {services['postgres']}")
    config.write_text(text.replace("coordination:\n", f"coordination:\n  prefix: {prefix}\n"))
    engine = sa.create_engine(normalize_url(services["postgres"]))
    try:
        before = set(sa.inspect(engine).get_table_names())
        assert explain_json(cli, config)["id"] == "1"
        after = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    # only this store's own tables are judged: other tests (other xdist workers) create and drop
    # theirs in the same database meanwhile
    assert not any(t.startswith(prefix) for t in after - before)
    assert not any(t.startswith(prefix) for t in after)


def test_unknown_index_is_named_with_the_known_ones(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, products=50, partition_size=100)
    run = run_cli(cli, "explain", "-c", str(tmp_path / "pipeline.yaml"), "--index", "prodcts")
    assert run.returncode == 2
    assert "'prodcts'" in run.stderr and "known: products" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("doc_id", "why"),
    [
        pytest.param("999999", "no row", id="absent"),
        pytest.param("abc", "not an integer", id="wrong-type"),
        pytest.param("reviews:1", "a child id where the index has no joins", id="child-prefix"),
    ],
)
def test_unknown_id_is_named(tmp_path: Path, cli: Path, doc_id: str, why: str) -> None:
    make_shop(tmp_path, products=50, partition_size=100)
    before = tree(tmp_path)
    run = run_cli(cli, "explain", "-c", str(tmp_path / "pipeline.yaml"), "--id", doc_id, "--json")
    assert run.returncode == 2, (why, run.stdout, run.stderr)
    assert f"--id {doc_id!r}" in run.stderr and "'products'" in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""
    assert tree(tmp_path) == before


def test_a_missing_sqlite_source_is_an_error_not_a_new_file(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, products=50, partition_size=100)
    config = tmp_path / "pipeline.yaml"
    config.write_text(config.read_text().replace("sqlite:///shop.db", "sqlite:///nowhere.db"))
    run = run_cli(cli, "explain", "-c", str(config))
    assert run.returncode == 2 and "nowhere.db does not exist" in run.stderr
    assert not (tmp_path / "nowhere.db").exists()
