"""The pipeline file ``sparkindex init`` writes: valid, commented where it chose, deterministic,
without secrets. SQLite only, no Spark (the end-to-end runs are in test_init_e2e.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from sparkindex.config.loader import parse_pipeline
from sparkindex.scaffold import InitOptions, scaffold
from sparkindex.scaffold.urls import secret_free_url
from tests.scaffold.helpers import rich_sqlite


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rich")
    rich_sqlite(folder)
    return folder


def unwrapped_comments(text: str) -> str:
    """Every comment's text, one per line, wrapped lines joined again."""
    out: list[str] = []
    for line in text.splitlines():
        body = line.strip()
        if not body.startswith("#"):
            continue
        body = body[1:].rstrip()
        if body.startswith("   ") and out:  # a wrapped comment's continuation
            out[-1] += " " + body.strip()
        else:
            out.append(body.strip())
    return "\n".join(out)


def test_the_written_pipeline_loads_and_names_every_root(rich: Path) -> None:
    result = scaffold(InitOptions(source=f"sqlite:///{rich / 'source.db'}", output=rich / "pipeline.yaml"))
    pipeline = parse_pipeline(result.text, origin="pipeline.yaml", base_dir=rich)
    assert [i.alias for i in pipeline.indexes] == ["lineitem", "employee", "book", "author", "currency"]
    assert result.aliases == ["lineitem", "employee", "book", "author", "currency"]
    # relative to the file, like the demo's: the database beside it, an embedded index, a local store
    assert pipeline.source.url == "sqlite:///source.db"
    assert pipeline.source_url() == f"sqlite:///{(rich / 'source.db').resolve()}"
    assert pipeline.target.url == "tantivy://index"
    # the store is left to the default, so that --state-dir moves it: written out, it would not
    assert pipeline.coordination.url is None and "coordination.url:" in result.text
    assert pipeline.coordination_url() == f"sqlite:///{(rich / '.sparkindex' / 'state.db').resolve()}"
    moved = parse_pipeline(result.text, origin="pipeline.yaml", base_dir=rich, state_dir=rich / "state")
    assert moved.coordination_url() == f"sqlite:///{(rich / 'state' / 'state.db').resolve()}"
    lineitem = pipeline.index("lineitem")
    assert lineitem.id == ["l_orderkey", "l_linenumber"]
    [orders, partsupp] = lineitem.relations
    assert (partsupp.local_key, partsupp.remote_key) == (["l_partkey", "l_suppkey"], ["ps_partkey", "ps_suppkey"])
    assert [r.name for r in orders.relations[0].relations] == ["nation"]  # orders > customer > nation
    book = pipeline.index("book")
    assert book.columns is not None and "cover" not in book.columns and "blurb" in book.columns
    link = next(r for r in book.relations if r.name == "book_author")
    assert (link.type, link.order_by, [r.name for r in link.relations]) == (
        "nested",
        ["book_id", "author_id"],
        ["author"],
    )
    assert pipeline.index("currency").id == ["code"]
    assert "sync" not in pipeline.model_fields_set  # SQLite keeps no log, and no table has a change column


def test_choices_are_commented_where_they_were_made(rich: Path) -> None:
    text = scaffold(InitOptions(source=f"sqlite:///{rich / 'source.db'}", output=rich / "pipeline.yaml")).text
    comments = unwrapped_comments(text)
    # the table without a usable key: commented out, with the reason
    assert re.search(r"^\s*#\s*- alias: audit_log$", text, re.M), text
    assert re.search(r"audit_log.*no primary key.*unique", comments)
    # a table without a primary key, keyed by its unique NOT NULL key
    assert re.search(r"currency.*unique.*\(code\)", comments)
    # cuts: depth limit, cycle, self-reference, a child without a key
    assert re.search(r"n_regionkey -> region.*depth limit 3", comments)
    assert re.search(r"department\.head_emp_id -> employee.*cycle", comments)
    assert re.search(r"employee\.manager_id -> employee.*self-reference", comments)
    assert re.search(r"audit_log.*not nested.*no primary key", comments)
    # columns: the blob left out, the unbounded text kept
    assert re.search(r"cover.*left out.*binary", comments)
    assert re.search(r"large text kept.*: blurb", comments)
    # many-to-many, and why there is no change capture
    assert re.search(r"many-to-many.*book.*author.*book_author", comments)
    assert re.search(r"change capture", comments, re.I) and "updated_at" in comments


def test_same_schema_same_bytes(rich: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{rich / 'source.db'}"
    first = scaffold(InitOptions(source=url, output=rich / "a.yaml")).text
    second = scaffold(InitOptions(source=url, output=rich / "a.yaml")).text
    assert first.encode() == second.encode()
    # a copy of the database elsewhere, same layout: same bytes again (no absolute paths, no clock)
    copy = tmp_path / "source.db"
    copy.write_bytes((rich / "source.db").read_bytes())
    third = scaffold(InitOptions(source=f"sqlite:///{copy}", output=tmp_path / "a.yaml")).text
    assert third.encode() == first.encode()


def test_named_tables_and_depth(rich: Path) -> None:
    result = scaffold(
        InitOptions(
            source=f"sqlite:///{rich / 'source.db'}", output=rich / "p.yaml", tables=["orders", "audit_log"], depth=1
        )
    )
    pipeline = parse_pipeline(result.text, origin="p.yaml", base_dir=rich)
    [orders] = pipeline.indexes
    assert [(r.name, r.type, r.relations) for r in orders.relations] == [
        ("customer", "object", []),
        ("lineitem", "nested", []),
    ]
    assert result.left_out == {"audit_log": result.left_out["audit_log"]} and "no primary key" in str(
        result.left_out["audit_log"]
    )
    assert "depth limit 1" in result.text


def test_only_tables_without_a_key_is_a_usage_error(rich: Path) -> None:
    from sparkindex.errors import UsageError

    with pytest.raises(UsageError, match=r"audit_log.*no primary key"):
        scaffold(InitOptions(source=f"sqlite:///{rich / 'source.db'}", output=rich / "p.yaml", tables=["audit_log"]))


def test_a_database_outside_the_folder_is_written_absolute(rich: Path, tmp_path: Path) -> None:
    text = scaffold(InitOptions(source=f"sqlite:///{rich / 'source.db'}", output=tmp_path / "p.yaml")).text
    assert yaml.safe_load(text)["source"]["url"] == f"sqlite:///{(rich / 'source.db').resolve()}"


def test_polling_is_proposed_when_every_table_has_a_change_column(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    with engine.begin() as conn:
        for ddl in (
            "CREATE TABLE category (id INTEGER PRIMARY KEY, name TEXT, updated_at DATETIME NOT NULL)",
            "CREATE TABLE product (id INTEGER PRIMARY KEY, name TEXT, category_id INTEGER REFERENCES category(id),"
            " updated_at DATETIME NOT NULL)",
            "CREATE TABLE review (id INTEGER PRIMARY KEY, product_id INTEGER REFERENCES product(id),"
            " body TEXT, modified_at BIGINT NOT NULL)",
        ):
            conn.exec_driver_sql(ddl)
    engine.dispose()
    result = scaffold(InitOptions(source=f"sqlite:///{tmp_path / 'shop.db'}", output=tmp_path / "p.yaml"))
    pipeline = parse_pipeline(result.text, origin="p.yaml", base_dir=tmp_path)
    assert result.capture == "polling"
    assert pipeline.sync.source == "polling"
    by_alias = {i.alias: i.changes for i in pipeline.indexes}
    product = by_alias["product"]
    assert product is not None and product.column == "updated_at" and product.tables == {"review": "modified_at"}
    review = by_alias["review"]
    assert review is not None and review.column == "modified_at"
    assert review.tables == {"product": "updated_at", "category": "updated_at"}
    assert all(c is not None for c in by_alias.values())


def test_a_target_password_is_an_environment_variable_too(rich: Path) -> None:
    target = "opensearchs://admin:Pa55%2Fword@search.example:9200"
    result = scaffold(
        InitOptions(source=f"sqlite:///{rich / 'source.db'}", output=rich / "p.yaml", tables=["book"], target=target)
    )
    assert "Pa55" not in result.text
    assert yaml.safe_load(result.text)["target"]["url"] == (
        "opensearchs://admin:${SPARKINDEX_TARGET_PASSWORD}@search.example:9200"
    )
    assert result.variables == ["SPARKINDEX_TARGET_PASSWORD"]
    env = {"SPARKINDEX_TARGET_PASSWORD": "Pa55%2Fword"}
    assert parse_pipeline(result.text, base_dir=rich, env=env).target.url == target


@pytest.mark.parametrize(
    ("url", "written", "variable"),
    [
        (
            "postgresql://app:s3cr%40t@db.example:5432/shop",
            "postgresql://app:${SPARKINDEX_SOURCE_PASSWORD}@db.example:5432/shop",
            "SPARKINDEX_SOURCE_PASSWORD",
        ),
        (
            "mysql://app@db.example/shop?password=s3cr%40t&charset=utf8mb4",
            "mysql://app@db.example/shop?password=${SPARKINDEX_SOURCE_PASSWORD}&charset=utf8mb4",
            "SPARKINDEX_SOURCE_PASSWORD",
        ),
        ("postgresql://app@db.example/shop", "postgresql://app@db.example/shop", None),
    ],
)
def test_passwords_become_environment_variables(url: str, written: str, variable: str | None) -> None:
    found = secret_free_url(url, "SPARKINDEX_SOURCE_PASSWORD")
    assert (found.url, found.variable) == (written, variable)
    if variable is not None:
        assert found.value == "s3cr%40t"
        assert "s3cr" not in found.url
