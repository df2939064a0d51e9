"""Polling change capture: the ``changes`` column exists, is monotone in type and is indexed; each
failure made real on the shop (SQLite), its fix applied as the check words it, then passing."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.shop import execute, make_shop
from tests.preflight.helpers import checks_of, sql_of, statuses

TABLES = ("products", "categories", "reviews", "users")


def _polled_shop(directory: Path, column: str) -> Path:
    make_shop(directory, products=20, partition_size=10)
    config = directory / "pipeline.yaml"
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("    complexity: 3.0\n", f"    complexity: 3.0\n    changes: {{column: {column}}}\n"),
        encoding="utf-8",
    )
    return config


def test_missing_column_then_added_then_indexed(tmp_path: Path) -> None:
    config = _polled_shop(tmp_path, "updated_at")
    db = tmp_path / "shop.db"
    checks = checks_of(config)
    assert statuses(checks, "polling.") == {f"polling.column:{t}": "FAIL" for t in TABLES}
    assert "column 'updated_at' not found in table 'products'" in checks["polling.column:products"].detail

    for table in TABLES:
        fix = sql_of(checks[f"polling.column:{table}"].fix)
        assert fix == f"ALTER TABLE {table} ADD COLUMN updated_at TIMESTAMP", fix
        execute(db, fix)
    checks = checks_of(config)
    assert statuses(checks, "polling.column:") == {f"polling.column:{t}": "OK" for t in TABLES}
    assert statuses(checks, "polling.index:") == {f"polling.index:{t}": "WARN" for t in TABLES}, "no index yet"

    for table in TABLES:
        execute(db, sql_of(checks[f"polling.index:{table}"].fix))
    checks = checks_of(config)
    assert set(statuses(checks, "polling.").values()) == {"OK"}, checks
    assert {c.status for c in checks.values()} == {"OK"}


def test_a_column_that_cannot_order_changes_fails(tmp_path: Path) -> None:
    checks = checks_of(_polled_shop(tmp_path, "name"))
    products = checks["polling.column:products"]
    assert products.status == "FAIL" and "integer or a date/time" in products.detail, products
    assert products.fix is not None and "timestamp or integer column" in products.fix
