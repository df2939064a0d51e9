"""``explain`` shows the bytes the reindex writes: the document it prints for an id is, byte for
byte, what a full reindex stored under that id (compared through the content hash the target
keeps for every document, and the stored source itself), on each database and build path.

Why: explain is only worth reading if it is the truth. It runs the reindex's own builder, and
these tests hold it to that on the paths that differ most: SQLite (Python), PostgreSQL (the server
writes the canonical JSON, and a float it writes with an exponent sends one document through the
decoding path), MariaDB (Python over unbuffered cursors), and composite keys with hostile parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sparkindex.config import load_pipeline
from sparkindex.documents.hashing import content_hash, dumps_document
from sparkindex.keys import document_id
from sparkindex.resources import open_target
from tests.e2e.shop import execute, make_shop
from tests.explain.helpers import explain_json, reindex, shop_on_server, tree
from tests.fresh_databases import DIALECTS, fresh_database

pytestmark = pytest.mark.slow

#: text PostgreSQL's to_json and orjson must escape alike: quotes, a backslash, a control
#: character (the byte canonical_sql uses as its mark, escaped in JSON), non-ASCII, a tab
HOSTILE_NAME = 'lamp "q" \\ é 日本 \x01 tab\there'


def _stored(config: Path, alias: str) -> dict[str, Any]:
    """id -> the stored document, read back from the index behind the alias."""
    with open_target(load_pipeline(config)) as target:
        return {d.id: d for d in target.read_documents(alias, size=100_000)}


def _hashes(config: Path, alias: str) -> dict[str, str]:
    with open_target(load_pipeline(config)) as target:
        return dict(target.scan_hashes(alias))


def _same_as_stored(body: dict[str, Any], hashes: dict[str, str], stored: dict[str, Any]) -> None:
    canonical = body["canonical"].encode("utf-8")
    assert content_hash(canonical) == body["hash"]
    assert hashes[body["id"]] == body["hash"], f"document {body['id']}: explain's bytes are not the reindex's"
    assert dumps_document(stored[body["id"]].source) == canonical
    assert body["document"] == stored[body["id"]].source


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ],
)
def test_explain_prints_the_bytes_the_reindex_wrote(
    kind: str, tmp_path: Path, cli: Path, request: pytest.FixtureRequest
) -> None:
    folder = tmp_path / "shop"
    make_shop(folder, products=1200, partition_size=400)
    db = folder / "shop.db"
    execute(db, "UPDATE products SET price = 1e-7 WHERE id = 5")  # PostgreSQL writes it 1e-07
    execute(db, "UPDATE products SET name = ? WHERE id = 17", (HOSTILE_NAME,))
    execute(db, "UPDATE products SET category_id = NULL WHERE id = 23")
    config = folder / "pipeline.yaml"
    if kind == "sqlite":
        _check_same_bytes(kind, folder, config, cli)
        return
    with shop_on_server(db, request.getfixturevalue("services")[kind]) as url:
        config.write_text(config.read_text().replace("url: sqlite:///shop.db", f"url: {url}"))
        _check_same_bytes(kind, folder, config, cli)


def _check_same_bytes(kind: str, folder: Path, config: Path, cli: Path) -> None:
    reindex(cli, config)
    hashes, stored = _hashes(config, "products"), _stored(config, "products")
    assert len(hashes) == 1200
    before = tree(folder)

    first = explain_json(cli, config)
    assert first["id"] == "1" and first["alias"] == "products" and first["failure"] is None
    _same_as_stored(first, hashes, stored)
    bodies = {doc_id: explain_json(cli, config, "--index", "products", "--id", doc_id) for doc_id in ("5", "17", "23")}
    for doc_id, body in bodies.items():
        assert body["id"] == doc_id
        _same_as_stored(body, hashes, stored)
    assert bodies["17"]["document"]["name"] == HOSTILE_NAME
    assert bodies["23"]["document"]["category"] is None

    build = first["build"]
    if kind == "postgres":
        assert build["path"] == "server-written JSON" and build["builder"] == "JsonAggregationBuilder"
        assert build["document"].startswith("server-written")
        assert bodies["17"]["build"]["document"].startswith("server-written")
        assert bodies["5"]["build"]["document"].startswith("decoded in Python"), bodies["5"]["build"]
        assert any("concat" in s.lower() for s in first["statements"]), first["statements"]
    else:
        assert build["path"] == "python" and build["builder"] == "DocumentBuilder"
        assert kind in build["reason"]
        tables = [s.split(" FROM ")[1].split()[0].strip('`"') for s in first["statements"]]
        assert tables == ["products", "categories", "reviews", "users"], first["statements"]
    assert tree(folder) == before, "explain changed the store, the index or the source folder"


@pytest.mark.parametrize("kind", [p for p in DIALECTS if p.id != "mysql"])
def test_composite_ids_with_separators_name_the_right_row(
    kind: str, tmp_path: Path, cli: Path, request: pytest.FixtureRequest
) -> None:
    """A composite key whose parts hold the separator and the escape: ``--id`` takes the id as
    keys.document_id writes it, and the document shown is the one the reindex stored under it."""
    hostile = [("x|y", "z"), ("x", "y|z"), ("back\\", "slash"), ("", "empty first"), ("ü|\\|", "|")]
    rows = [*hostile, *((f"k{i:03}", "v") for i in range(120))]

    def load(engine: sa.Engine) -> None:
        meta = sa.MetaData()
        pairs = sa.Table(
            "pairs",
            meta,
            sa.Column("a", sa.String(40), primary_key=True),
            sa.Column("b", sa.String(40), primary_key=True),
            sa.Column("label", sa.Text, nullable=False),
            sa.Column("score", sa.Float(precision=53)),
        )
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                pairs.insert(), [{"a": a, "b": b, "label": f"{a}/{b}", "score": n / 8} for n, (a, b) in enumerate(rows)]
            )

    folder = tmp_path / "pairs"
    folder.mkdir()
    with fresh_database(kind, folder, lambda: request.getfixturevalue("services"), load) as url:
        config = folder / "pipeline.yaml"
        config.write_text(
            f"source:\n  url: {url}\ntarget:\n  url: tantivy://index\nspark:\n  master: local[2,4]\n"
            "indexes:\n  - alias: pairs\n    table: pairs\n    partition_size: 40\n",
            encoding="utf-8",
        )
        reindex(cli, config)
        hashes, stored = _hashes(config, "pairs"), _stored(config, "pairs")
        assert len(hashes) == len(rows)
        for a, b in hostile:
            doc_id = document_id((a, b))
            body = explain_json(cli, config, "--id", doc_id)
            assert body["id"] == doc_id and (body["document"]["a"], body["document"]["b"]) == (a, b)
            _same_as_stored(body, hashes, stored)
        plan = explain_json(cli, config)["partitions"]
        assert 3 <= plan["count"] <= 5 and plan["counted"] and plan["source_rows"] == len(rows)
        assert sum(p["rows"] for p in plan["largest"]) == len(rows)  # every partition listed, counted
