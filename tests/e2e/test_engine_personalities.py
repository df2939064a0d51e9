"""The commands a user runs, against engine versions other than the newest: the shop reindexed,
kept in sync and verified through Elasticsearch 8's personality, and an index that bears the
alias's name adopted with ``reindex --adopt`` (refused, untouched, without it).

The engines are osmem-server, a TEST DOUBLE, behind the proxy playing that version
(:mod:`tests.support.personalities`).
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from tests.support.http_proxy import HttpProxy
from tests.support.osmem import *  # noqa: F403 (the osmem and osmem_cluster fixtures: a test double)
from tests.support.osmem import OsmemCluster
from tests.support.personalities import ES_8, OS_1

pytestmark = pytest.mark.slow

PRODUCTS = 600
SHOP_TABLES = ("products", "categories", "reviews", "users")


def _shop(directory: Path, target: str) -> Path:
    """The demo shop on SQLite with a version column per table, polled for changes."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "shop.db"
    generate_shop(db, PRODUCTS)
    conn = sqlite3.connect(db)
    for table in SHOP_TABLES:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN version INTEGER NOT NULL DEFAULT 1")
    conn.commit()
    conn.close()
    text = PIPELINE_YAML.format(partition_size=150).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("url: tantivy://index", f"url: {target}")
    text = text.replace("    complexity: 3.0\n", "    complexity: 3.0\n    changes: {column: version}\n")
    config = directory / "pipeline.yaml"
    config.write_text(text + "sync:\n  trigger_s: 0.2\n", encoding="utf-8")
    return config


def _run(cli: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    done = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, (orjson.loads(lines[-1]) if lines else None), done.stderr


def _clean(verify: dict[str, Any] | None) -> None:
    assert verify is not None
    assert {k: verify[k] for k in ("missing", "extra", "stale", "duplicates")} == dict.fromkeys(
        ("missing", "extra", "stale", "duplicates"), 0
    ), verify


def test_the_shop_through_elasticsearch_8(cli: Path, tmp_path: Path, osmem_cluster: OsmemCluster) -> None:
    proxy = HttpProxy(osmem_cluster.url, personality=ES_8)
    try:
        config = _shop(tmp_path / "shop", f"elasticsearch://{proxy.host_port}")
        code, _, err = _run(cli, "check", "-c", str(config))
        assert code in (0, 1), err
        code, summary, err = _run(cli, "reindex", "-c", str(config), "--json")
        assert code == 0 and summary is not None and summary["status"] == "COMPLETED", err
        assert summary["indexed"] == PRODUCTS
        conn = sqlite3.connect(tmp_path / "shop" / "shop.db")
        conn.execute("UPDATE products SET name = name || ' (8)', version = version + 1 WHERE id % 7 = 0")
        conn.execute("DELETE FROM reviews WHERE product_id % 11 = 0")
        conn.execute("UPDATE products SET version = version + 1 WHERE id % 11 = 0")  # their reviews changed
        conn.execute("DELETE FROM products WHERE id % 13 = 0 AND id % 7 != 0 AND id % 11 != 0")
        conn.commit()
        conn.close()
        code, synced, err = _run(cli, "sync", "-c", str(config), "--until-caught-up", "--json")
        assert code == 0 and synced is not None, err
        assert synced["applied"] > 0 and synced["deleted"] > 0, synced
        code, verify, err = _run(cli, "verify", "-c", str(config), "--json")
        assert code == 0, err
        _clean(verify)
    finally:
        proxy.close()
    kinds = {m for m in proxy.media_types if "vnd.elasticsearch" in m}
    assert kinds and all("compatible-with=8" in m for m in kinds), kinds


def test_reindex_adopts_an_index_named_like_the_alias_only_when_asked(
    cli: Path, tmp_path: Path, osmem_cluster: OsmemCluster
) -> None:
    """A PGSync user's index ``products`` (a concrete index): refused and untouched without
    ``--adopt``; with it, ``products`` is the alias of ``products_v1`` and the old index is gone.
    Through OpenSearch 1.3's personality, which has no ``must_exist``."""
    osmem_cluster.request("PUT", "/products", {"mappings": {"properties": {"title": {"type": "text"}}}})
    osmem_cluster.request("PUT", "/products/_doc/legacy-1?refresh=true", {"title": "from the old indexer"})
    proxy = HttpProxy(osmem_cluster.url, personality=OS_1)
    try:
        config = _shop(tmp_path / "shop", f"opensearch://{proxy.host_port}")
        code, _, err = _run(cli, "reindex", "-c", str(config), "--json")
        assert code == 2, err
        assert "reindex --adopt" in err and "'products'" in err, err
        count = osmem_cluster.request("GET", "/products/_count")
        assert isinstance(count, dict) and count["count"] == 1, "the old index is untouched"
        assert "products_v1" not in str(osmem_cluster.request("GET", "/_cat/indices?format=json")), "nothing built"

        code, summary, err = _run(cli, "reindex", "-c", str(config), "--adopt", "--json")
        assert code == 0 and summary is not None, err
        assert (summary["status"], summary["index"], summary["indexed"]) == ("COMPLETED", "products_v1", PRODUCTS)
        aliases = osmem_cluster.request("GET", "/_alias/products")
        assert aliases == {"products_v1": {"aliases": {"products": {"is_write_index": True}}}}, aliases
        code, verify, err = _run(cli, "verify", "-c", str(config), "--json")
        assert code == 0, err
        _clean(verify)
    finally:
        proxy.close()
    assert not any(b"must_exist" in body for body in proxy.alias_bodies)
    assert any(b"remove_index" in body for body in proxy.alias_bodies)
