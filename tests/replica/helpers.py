"""The shop on a primary of the suite, read through its replica (``scripts/test-replicas.sh``):
the pipeline's ``source.read_url`` names the replica; change capture reads the primary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from sparkindex.targets.registry import open_target
from tests.capture.helpers import HOSTILE, Shop, wait_until

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "sparkindex"


def start_replicas() -> None:
    """The replicas run (idempotent: a running, following replica is left as it is)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "test-replicas.sh")], check=True, capture_output=True)


def replica_url(url: str, port: int) -> str:
    return sa.make_url(url).set(port=port).render_as_string(hide_password=False)


def set_read_url(shop: Shop, read_url: str, max_lag_s: float) -> None:
    """The shop's pipeline reads *read_url*, waiting for it up to *max_lag_s*."""
    path = shop.directory / "pipeline.yaml"
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if "read_url" not in line]
    lines = [line for line in lines if "max_replica_lag_s" not in line]
    at = lines.index(f"  url: {shop.url}") + 1
    lines[at:at] = [f"  read_url: {read_url}", f"  max_replica_lag_s: {max_lag_s}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def query(url: str, statement: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.execute(sa.text(statement), params or {})
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def cli(shop: Shop, *args: str) -> subprocess.CompletedProcess[str]:
    config = str(shop.directory / "pipeline.yaml")
    return subprocess.run([str(CLI), *args, "-c", config], capture_output=True, text=True, timeout=300)


def assert_verify_clean(shop: Shop) -> None:
    run = cli(shop, "verify", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    [report] = orjson.loads(run.stdout)["reports"] if "reports" in run.stdout else [orjson.loads(run.stdout)]
    for count in ("missing", "extra", "stale", "duplicates"):
        assert report[count] == 0, report


def alias_target(shop: Shop) -> str | None:
    target = open_target(shop.pipeline.target.url, shop.pipeline.base_dir, shop.pipeline.target.options)
    try:
        return target.alias_target("products")
    finally:
        target.close()


def write_during_rebuild(shop: Shop) -> dict[str, str | None]:
    """An insert, an update and a delete (one transaction each) with hostile text; what each
    product's name must be in the index afterwards (None: gone)."""
    inserted, updated, deleted = 900_001, 2, 3
    shop.sql(
        "INSERT INTO products (id, name, description, price, stock, category_id, created_at) "
        "VALUES (:id, :n, 'new', 2.5, 1, 1, '2026-02-02 00:00:00')",
        params={"id": inserted, "n": HOSTILE[0] + " " + HOSTILE[3]},
    )
    shop.sql("UPDATE products SET name = :n WHERE id = :id", params={"n": HOSTILE[1] + HOSTILE[2], "id": updated})
    shop.sql("DELETE FROM reviews WHERE product_id = 3", "DELETE FROM products WHERE id = 3")
    return {str(inserted): HOSTILE[0] + " " + HOSTILE[3], str(updated): HOSTILE[1] + HOSTILE[2], str(deleted): None}


def assert_written(shop: Shop, expected: dict[str, str | None]) -> None:
    for doc_id, name in expected.items():
        doc = shop.document(doc_id)
        assert (doc or {}).get("name") == name if name is not None else doc is None, (doc_id, doc)


def wait_for_line(process: Any, text: str, timeout: float) -> None:
    wait_until(lambda: process.assert_running("the reindex") and text in process.stderr_text(), timeout, repr(text))
