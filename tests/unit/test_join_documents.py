"""Parent-child (``type: join``) documents: ids, routing, bodies, sort keys, versions, the mapping,
config errors, and the refusal on targets without joins. Hostile keys throughout: composite keys
whose parts hold the id separator, backslashes and colons, mixed case, empty strings, NULL foreign
keys. Real SQLite, PostgreSQL and MariaDB; nothing mocked."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from tests.fresh_databases import DIALECTS, fresh_database

from sparkindex.config import parse_pipeline
from sparkindex.config.indexes import IndexConfig, JoinConfig, RelationConfig
from sparkindex.documents import infer_mapping, resolve_index
from sparkindex.documents.builder import DocumentBuilder, Page, make_builder
from sparkindex.documents.join import split_child_id
from sparkindex.documents.planning import resolve_plans
from sparkindex.errors import ConfigError
from sparkindex.keys import sort_key
from sparkindex.resources import open_source_url
from sparkindex.sources.base import KeyRange, Source

OWNERS = [
    ("EU", "a|b", "Ann", 1),
    ("EU", "a", "Bob", 2),
    ("eu", "a", "lower-case region", 3),
    ("EU", "x\\y:z", "backslash and colon", 4),
    ("pets:EU", "c", "an id that looks like a child's", 5),
    ("", "", "empty parts", 6),
]
PETS = [
    ("EU", "t|1", "EU", "a|b", "Rex", 12.5, 10),
    ("EU", "t\\2", "EU", "a|b", None, None, 11),
    ("EU", "t:3", "EU", "a", "Tom", 3.0, 12),
    ("eu", "t|1", "eu", "a", "lower rex", 1.0, 13),
    ("EU", "orphan", None, None, "no owner", 1.0, 14),
    ("EU", "nov", "EU", "x\\y:z", "no version", 1.0, None),
    ("EU", "kid", "pets:EU", "c", "child of a refused parent", 1.0, 15),
    ("", "", "", "", "empty keys", 0.0, 16),
]


def _load(engine: sa.Engine) -> None:
    meta = sa.MetaData()
    s20, s40 = sa.String(20), sa.String(40)
    owners = sa.Table(
        "owners",
        meta,
        sa.Column("region", s20, primary_key=True),
        sa.Column("code", s40, primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column("rv", sa.BigInteger),
    )
    pets = sa.Table(
        "pets",
        meta,
        sa.Column("region", s20, primary_key=True),
        sa.Column("tag", s40, primary_key=True),
        sa.Column("owner_region", s20),
        sa.Column("owner_code", s40),
        sa.Column("name", sa.Text),
        sa.Column("weight", sa.Float),
        sa.Column("updated", sa.BigInteger),
        sa.ForeignKeyConstraint(["owner_region", "owner_code"], ["owners.region", "owners.code"]),
    )
    vets = sa.Table(
        "vets", meta, sa.Column("id", sa.Integer, primary_key=True, autoincrement=False), sa.Column("name", sa.Text)
    )
    visits = sa.Table(
        "visits",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("pet_region", s20),
        sa.Column("pet_tag", s40),
        sa.Column("vet_id", sa.Integer, sa.ForeignKey("vets.id")),
        sa.Column("note", sa.Text),
        sa.ForeignKeyConstraint(["pet_region", "pet_tag"], ["pets.region", "pets.tag"]),
    )
    sa.Table(
        "notes",  # no primary key
        meta,
        sa.Column("owner_region", s20),
        sa.Column("owner_code", s40),
        sa.Column("body", sa.Text),
        sa.ForeignKeyConstraint(["owner_region", "owner_code"], ["owners.region", "owners.code"]),
    )
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(owners.insert(), [dict(zip(["region", "code", "name", "rv"], r, strict=True)) for r in OWNERS])
        cols = ["region", "tag", "owner_region", "owner_code", "name", "weight", "updated"]
        conn.execute(pets.insert(), [dict(zip(cols, r, strict=True)) for r in PETS])
        conn.execute(vets.insert(), [{"id": 1, "name": "Dr. Who"}, {"id": 2, "name": None}])
        conn.execute(
            visits.insert(),
            [
                {"id": 1, "pet_region": "EU", "pet_tag": "t|1", "vet_id": 1, "note": "first"},
                {"id": 2, "pet_region": "EU", "pet_tag": "t|1", "vet_id": None, "note": "no vet"},
                {"id": 3, "pet_region": "eu", "pet_tag": "t|1", "vet_id": 2, "note": "other region"},
            ],
        )


@pytest.fixture(scope="module", params=DIALECTS)
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    kind = request.param
    folder = tmp_path_factory.mktemp(f"join-{kind}")
    with fresh_database(kind, folder, lambda: request.getfixturevalue("services"), _load) as url:
        yield kind, url


@pytest.fixture
def source(database: tuple[str, str]) -> Iterator[Source]:
    s = open_source_url(database[1])
    yield s
    s.close()


def owners_config(**kw: Any) -> IndexConfig:
    pets = RelationConfig(
        name="pets",
        type="join",
        table="pets",
        version="updated",
        relations=[
            RelationConfig(
                name="visits",
                type="nested",
                table="visits",
                relations=[RelationConfig(name="vet", type="object", table="vets")],
            )
        ],
    )
    return IndexConfig.model_validate({"alias": "owners", "table": "owners", "relations": [pets], **kw})


def page_of(source: Source, cfg: IndexConfig, limit: int = 100, build: str = "python", after: Any = None) -> Page:
    plan = resolve_index(source, cfg.model_copy(update={"build": build}), "indexes[0]")
    builder = DocumentBuilder(source, plan) if build == "python" else make_builder(source, plan)
    return builder.page(KeyRange(None, None), after, limit)


# -- documents -----------------------------------------------------------------------------------------
PARENT_IDS = {"EU|a\\|b", "EU|a", "eu|a", "EU|x\\\\y:z", "|"}
CHILDREN = {  # id -> routing (the parent's id), with every separator escaped
    "pets:EU|t\\|1": "EU|a\\|b",
    "pets:EU|t\\\\2": "EU|a\\|b",
    "pets:EU|t:3": "EU|a",
    "pets:eu|t\\|1": "eu|a",
    "pets:EU|kid": "pets:EU|c",
    "pets:|": "|",
}


def test_children_are_documents_routed_to_their_parents(source: Source) -> None:
    page = page_of(source, owners_config())
    docs = {d.id: d for d in page.docs}
    assert set(docs) == PARENT_IDS | set(CHILDREN)
    assert {d: docs[d].routing for d in CHILDREN} == CHILDREN
    assert all(docs[p].routing is None for p in PARENT_IDS)
    # the NULL foreign key has no parent and is no document; a NULL version is a failure, as is a
    # parent whose id would share the children's id space
    failures = {f.doc_id: f.error_class for f in page.failures}
    assert failures == {"pets:EU|nov": "NullVersion", "pets:EU|c": "IdCollision"}
    assert page.rows == len(OWNERS) and page.children == 7
    assert len(page.docs) + len(page.failures) == page.rows + page.children


def test_child_bodies_sit_under_the_relation_name_with_the_join_field(source: Source) -> None:
    docs = {d.id: d for d in page_of(source, owners_config()).docs}
    rex = orjson.loads(docs["pets:EU|t\\|1"].source)
    assert rex == {
        "join": {"name": "pets", "parent": "EU|a\\|b"},
        "pets": {
            "region": "EU",
            "tag": "t|1",
            "owner_region": "EU",
            "owner_code": "a|b",
            "name": "Rex",
            "weight": 12.5,
            "updated": 10,
            "visits": [
                {
                    "id": 1,
                    "pet_region": "EU",
                    "pet_tag": "t|1",
                    "vet_id": 1,
                    "note": "first",
                    "vet": {"id": 1, "name": "Dr. Who"},
                },
                {"id": 2, "pet_region": "EU", "pet_tag": "t|1", "vet_id": None, "note": "no vet", "vet": None},
            ],
        },
    }
    nulls = orjson.loads(docs["pets:EU|t\\\\2"].source)["pets"]
    assert nulls["name"] is None and nulls["weight"] is None and nulls["visits"] == []
    assert orjson.loads(docs["EU|a\\|b"].source) == {
        "region": "EU",
        "code": "a|b",
        "name": "Ann",
        "rv": 1,
        "join": "owners",
    }
    assert docs["pets:EU|t\\|1"].version == 10 and docs["EU|a\\|b"].version is None


def test_child_ids_split_back_into_their_keys(source: Source) -> None:
    docs = {d.id: d for d in page_of(source, owners_config()).docs}
    keys = {split_child_id(doc_id, 2)[1][1] for doc_id in CHILDREN}
    assert keys == {"t|1", "t\\2", "t:3", "kid", ""}
    for doc_id in CHILDREN:
        relation, (region, tag) = split_child_id(doc_id, 2)
        body = orjson.loads(docs[doc_id].source)["pets"]
        assert relation == "pets" and (region, tag) == (body["region"], body["tag"])


def test_children_sort_right_after_their_parent(source: Source) -> None:
    docs = {d.id: d for d in page_of(source, owners_config()).docs}
    parents = sorted(sort_key((r, c)) for r, c, *_ in OWNERS)
    for child_id, parent_id in CHILDREN.items():
        child = docs[child_id].sort_key
        assert child is not None
        body = orjson.loads(docs[child_id].source)["pets"]
        mine = sort_key((body["owner_region"], body["owner_code"]))
        assert child.startswith(mine), child_id
        later = [p for p in parents if p > mine]
        assert mine < child and (not later or child < later[0]), child_id
        if parent_id in docs:
            assert docs[parent_id].sort_key == mine


def test_children_come_with_their_parents_page(source: Source) -> None:
    """Paging by parents: every child arrives on the page of its parent, none twice."""
    seen: list[str] = []
    after = None
    while True:
        page = page_of(source, owners_config(), limit=2, after=after)
        parents = {d.id for d in page.docs if d.routing is None}
        parents |= {f.doc_id for f in page.failures if f.error_class == "IdCollision"}
        for d in page.docs:
            if d.routing is not None:
                assert d.routing in parents, f"{d.id} arrived without its parent {d.routing}"
        seen.extend(d.id for d in page.docs)
        if page.rows < 2:
            break
        after = page.last_key
    assert sorted(seen) == sorted(PARENT_IDS | set(CHILDREN))


def test_children_are_fetched_per_page_not_per_row(source: Source) -> None:
    """Six parents, seven children, three visits: one query per table, whatever the page holds."""
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    page_of(source, owners_config())  # resolve (reflection) outside the count
    sa.event.listen(source.engine, "before_cursor_execute", count)
    try:
        page = page_of(source, owners_config())
    finally:
        sa.event.remove(source.engine, "before_cursor_execute", count)
    assert page.rows == 6 and page.children == 7
    tables = ["owners", "pets", "visits", "vets"]
    assert len(statements) == len(tables), statements
    for table, statement in zip(tables, statements, strict=True):
        assert table in statement


def test_bulk_items_carry_routing_version_and_sort_key(source: Source) -> None:
    doc = next(d for d in page_of(source, owners_config()).docs if d.id == "pets:eu|t\\|1")
    item = doc.bulk_item()
    assert (item.id, item.routing, item.version, item.op) == ("pets:eu|t\\|1", "eu|a", 13, "index")
    assert item.source == doc.source and item.hash == doc.hash and item.sort_key == doc.sort_key


def test_join_field_and_parent_names_are_configurable(source: Source) -> None:
    cfg = owners_config(join={"field": "kind", "parent": "owner"})
    docs = {d.id: d for d in page_of(source, cfg).docs}
    assert orjson.loads(docs["EU|a"].source)["kind"] == "owner"
    assert orjson.loads(docs["pets:EU|t:3"].source)["kind"] == {"name": "pets", "parent": "EU|a"}
    props = infer_mapping(resolve_index(source, cfg, "indexes[0]"), "indexes[0]")["properties"]
    assert props["kind"] == {"type": "join", "relations": {"owner": "pets"}}


def test_both_builders_build_the_same_families(database: tuple[str, str], source: Source) -> None:
    if database[0] != "postgres":
        pytest.skip("documents are assembled in the database on PostgreSQL only")

    def described(page: Page) -> tuple[dict[str, tuple[Any, ...]], dict[str, str]]:
        docs = {d.id: (d.hash, d.routing, d.version, d.sort_key) for d in page.docs}
        return docs, {f.doc_id: f.error_class for f in page.failures}

    python = described(page_of(source, owners_config(), build="python"))
    assert described(page_of(source, owners_config(), build="database")) == python
    assert len(python[0]) == len(PARENT_IDS) + len(CHILDREN)


# -- the mapping -----------------------------------------------------------------------------------------
def test_mapping_declares_the_join_field_and_the_childrens_fields(source: Source) -> None:
    mapping = infer_mapping(resolve_index(source, owners_config(), "indexes[0]"), "indexes[0]")
    props = mapping["properties"]
    assert props["join"] == {"type": "join", "relations": {"owners": "pets"}}
    assert props["pets"]["type"] == "object"
    assert set(props["pets"]["properties"]) == {
        "region", "tag", "owner_region", "owner_code", "name", "weight", "updated", "visits"
    }  # fmt: skip
    assert props["pets"]["properties"]["visits"]["type"] == "nested"
    assert set(props) == {"region", "code", "name", "rv", "pets", "join"}


def test_two_join_relations_list_both_children(source: Source) -> None:
    cfg = owners_config()
    cfg.relations.append(
        RelationConfig(name="pets_again", type="join", table="pets", columns=["name"], local_key=["region", "code"])
    )
    props = infer_mapping(resolve_index(source, cfg, "indexes[0]"), "indexes[0]")["properties"]
    assert props["join"] == {"type": "join", "relations": {"owners": ["pets", "pets_again"]}}


# -- config errors (the schema is the same on every dialect: SQLite is enough) ----------------------------
@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[Source]:
    with fresh_database("sqlite", tmp_path, dict, _load) as url:
        s = open_source_url(url)
        yield s
        s.close()


def join_error(source: Source, cfg: IndexConfig) -> str:
    with pytest.raises(ConfigError) as err:
        plan = resolve_index(source, cfg, "p.yaml: indexes[0]")
        infer_mapping(plan, "p.yaml: indexes[0]")
    return str(err.value)


def test_join_inside_another_relation_is_refused(sqlite_source: Source) -> None:
    cfg = IndexConfig(
        alias="owners",
        table="owners",
        relations=[
            RelationConfig(
                name="pets",
                type="nested",
                table="pets",
                relations=[RelationConfig(name="visits", type="join", table="visits")],
            )
        ],
    )
    assert join_error(sqlite_source, cfg).startswith(
        "p.yaml: indexes[0].relations[0].relations[0].type: a join relation makes documents of its own"
    )


def test_join_must_reference_the_index_id(sqlite_source: Source) -> None:
    cfg = IndexConfig(
        alias="owners",
        table="owners",
        relations=[RelationConfig(name="pets", type="join", table="pets", local_key="name", remote_key="name")],
    )
    assert join_error(sqlite_source, cfg) == (
        "p.yaml: indexes[0].relations[0].local_key: a join child is routed to its parent's document id, so it "
        "must reference the index's id columns (region, code) of table 'owners', not name"
    )
    reordered = IndexConfig(
        alias="owners",
        table="owners",
        id=["code", "region"],
        relations=[RelationConfig(name="pets", type="join", table="pets")],
    )
    assert join_error(sqlite_source, reordered) == (
        "p.yaml: indexes[0].relations[0]: cannot infer remote_key: table 'pets' has 0 foreign keys to the id "
        "(code, region) of 'owners'; set remote_key (columns of 'pets') explicitly"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"relations": [{"name": "pe:ts", "type": "join", "table": "pets"}]},
            "p.yaml: indexes[0].relations[0].name: 'pe:ts' contains ':'; a join relation's name begins its "
            "documents' ids ('<name>:<key>') and must not contain ':'",
        ),
        (
            {"relations": [{"name": "pets", "type": "join", "table": "notes"}]},
            "p.yaml: indexes[0].relations[0].table: table 'notes' has no primary key; the rows of a join relation "
            "become documents whose ids are their primary keys",
        ),
        (
            {"join": {"field": "name"}, "relations": [{"name": "pets", "type": "join", "table": "pets"}]},
            "p.yaml: indexes[0].join.field: the join field 'name' is also a column or relation of the documents; "
            "name another join field",
        ),
        (
            {"join": {"parent": "pets"}, "relations": [{"name": "pets", "type": "join", "table": "pets"}]},
            "p.yaml: indexes[0].join.parent: the parents' name 'pets' is also a join relation's name; the join "
            "field could not tell parents from children",
        ),
        ({"join": {"field": "kind"}}, "p.yaml: indexes[0].join: no relation of this index has type: join"),
        (
            {"relations": [{"name": "pets", "type": "nested", "table": "pets", "version": "updated"}]},
            "p.yaml: indexes[0].relations[0].version: only a join relation's rows are documents with versions of "
            "their own; the index's documents take theirs from the index's `version`",
        ),
        (
            {"relations": [{"name": "pets", "type": "join", "table": "pets", "version": "name"}]},
            "p.yaml: indexes[0].relations[0].version: column 'name' of table 'pets' is TEXT; a version must be an "
            "integer or a date/time column (integers are used as they are, date/times as microseconds since "
            "1970-01-01 UTC)",
        ),
        (
            {
                "relations": [
                    {"name": "pets", "type": "join", "table": "pets"},
                    {"name": "pets", "type": "nested", "table": "pets"},
                ]
            },
            "p.yaml: indexes[0].relations[1].name: 'pets' names an earlier relation too",
        ),
        (
            {"relations": [{"name": "pets", "type": "join", "table": "pets"}], "fields": {"join": {"keyword": True}}},
            "p.yaml: indexes[0].fields.join: 'join' is the join field, which the join relations declare",
        ),
        (
            {
                "relations": [{"name": "pets", "type": "join", "table": "pets"}],
                "mapping": {"properties": {"join": {"type": "keyword"}}},
            },
            "p.yaml: indexes[0].mapping.properties.join: 'join' is the join field, which the join relations declare",
        ),
    ],
    ids=[
        "colon",
        "no-primary-key",
        "field-clash",
        "parent-clash",
        "join-without-joins",
        "version-on-nested",
        "text-version",
        "duplicate-name",
        "fields-on-join",
        "mapping-on-join",
    ],
)
def test_join_config_errors_name_key_and_cause(sqlite_source: Source, change: dict[str, Any], expected: str) -> None:
    cfg = IndexConfig.model_validate({"alias": "owners", "table": "owners", **change})
    assert join_error(sqlite_source, cfg) == expected


def test_join_names_are_checked_when_parsed() -> None:
    with pytest.raises(ConfigError) as err:
        parse_pipeline(
            "source: {url: 'sqlite:///x.db'}\nindexes:\n  - alias: a\n    table: t\n"
            "    join: {field: 'two words', parent: 'a:b'}\n",
            origin="p.yaml",
            env={},
        )
    msg = str(err.value)
    assert "p.yaml: indexes[0].join.field: String should match pattern" in msg
    assert "p.yaml: indexes[0].join.parent: String should match pattern" in msg
    assert JoinConfig().field == "join"


# -- targets without joins ----------------------------------------------------------------------------------
JOIN_PIPELINE = """\
source:
  url: sqlite:///{db}?password=hunter2
target:
  url: tantivy://index
indexes:
  - alias: other
    table: vets
  - alias: owners
    table: owners
    relations:
      - name: category
        type: object
        table: vets
        local_key: rv
      - name: pets
        type: join
        table: pets
"""
TANTIVY_REFUSAL = (
    "indexes[1].relations[1].type: join relations make parent-child documents, which target 'tantivy://index' "
    "cannot hold; use type: nested, or an OpenSearch or Elasticsearch target"
)


def test_tantivy_refuses_join_relations_at_planning(sqlite_source: Source, tmp_path: Path) -> None:
    db = Path(str(sqlite_source.engine.url.database))
    pipeline = parse_pipeline(JOIN_PIPELINE.format(db=db), origin="p.yaml", base_dir=tmp_path, env={})
    with pytest.raises(ConfigError) as err:
        resolve_plans(pipeline, sqlite_source, ["other", "owners"])
    assert str(err.value) == f"p.yaml: {TANTIVY_REFUSAL}"
    assert err.value.exit_code == 2
    assert not (tmp_path / "index").exists(), "nothing may be created before the refusal"
    assert set(resolve_plans(pipeline, sqlite_source, ["other"])) == {"other"}  # other aliases plan as before


@pytest.mark.parametrize("command", ["reindex", "verify"])
def test_cli_refuses_a_join_on_tantivy_with_exit_code_2(tmp_path: Path, command: str) -> None:
    with fresh_database("sqlite", tmp_path, dict, _load) as url:
        path = tmp_path / "pipeline.yaml"
        path.write_text(JOIN_PIPELINE.format(db=url.removeprefix("sqlite:///")), encoding="utf-8")
        env = {**os.environ, "COLUMNS": "1000"}
        cli = Path(sys.executable).parent / "sparkindex"
        res = subprocess.run(
            [str(cli), command, "-c", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert res.returncode == 2, res.stdout + res.stderr
    assert TANTIVY_REFUSAL in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr and "hunter2" not in res.stderr + res.stdout
    assert not (tmp_path / "index").exists()
