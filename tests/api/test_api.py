"""``sparkindex.api``: the commands as calls, on the demo shop (SQLite) into an embedded Tantivy
index on real Spark; and the README's Python example, run in a process of its own as a scheduler
would run it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sparkindex import api
from tests.e2e.shop import make_shop

ROOT = Path(__file__).resolve().parents[2]
PRODUCTS = 400


@pytest.mark.slow
def test_reindex_verify_repair_status_and_check_as_calls(tmp_path: Path, spark: Any) -> None:
    make_shop(tmp_path, PRODUCTS, partition_size=100)
    config = tmp_path / "pipeline.yaml"
    assert api.status(config).job_id is None

    built = api.reindex(config, spark=spark)
    assert (built.outcome, built.status, built.indexed, built.index) == (
        api.Outcome.DONE,
        "COMPLETED",
        PRODUCTS,
        "products_v1",
    )

    clean = api.verify(api.load(config), spark=spark)  # a loaded Pipeline works as well as its path
    assert (clean.outcome, clean.clean, clean.missing, clean.stale, clean.checked) == (
        api.Outcome.DONE,
        True,
        0,
        0,
        PRODUCTS,
    )

    conn = sqlite3.connect(tmp_path / "shop.db")
    conn.execute("UPDATE products SET name = name || ' (changed)' WHERE id % 10 = 0")
    conn.commit()
    conn.close()
    drift = api.verify(config, spark=spark)
    assert drift.outcome is api.Outcome.DONE_WITH_ERRORS and drift.stale == PRODUCTS // 10, drift
    fixed = api.repair(config, spark=spark)
    assert fixed.clean and fixed.report["repair"]["indexed"] == PRODUCTS // 10, fixed.report
    assert api.verify(config, spark=spark).clean

    status = api.status(config)
    assert (status.job_id, status.status) == (built.job_id, "COMPLETED")
    assert status.report["verify"]["products"]["stale"] == 0

    checked = api.check(config)
    assert checked.ok and checked.exit_code in (0, 1) and {c["name"] for c in checked.checks} >= {"target.writable"}


def test_bad_input_raises_config_errors_naming_where(tmp_path: Path) -> None:
    with pytest.raises(api.ConfigError, match="pipeline file not found"):
        api.load(tmp_path / "missing.yaml")
    with pytest.raises(api.ConfigError, match="pipeline file not found"):
        api.load(f"{tmp_path / 'missing.yaml'}\n")  # a path with a line break is still a path
    with pytest.raises(api.ConfigError, match="<pipeline text>"):
        api.load("source:\n  url: [\n")
    with pytest.raises(api.ConfigError, match=r"<pipeline text>.*target"):
        api.load("{source: {url: 'sqlite:///x.db'}, target: 3, indexes: []}")  # one-line YAML is YAML
    with pytest.raises(api.UsageError, match="on_gap"):
        api.sync(tmp_path / "missing.yaml", on_gap="ignore")  # type: ignore[arg-type]


def test_a_failed_preflight_raises_with_the_failed_checks_in_the_message(tmp_path: Path) -> None:
    make_shop(tmp_path, 20, partition_size=10)
    config = tmp_path / "pipeline.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("table: products", "table: no_such_table"), "utf-8")
    with pytest.raises(api.ConfigError) as refused:
        api.reindex(config)
    assert "preflight check(s) failed" in str(refused.value)
    assert "FAIL" in str(refused.value) and "no_such_table" in str(refused.value), refused.value
    checked = api.check(config)
    assert (checked.outcome, checked.ok, checked.exit_code) == (api.Outcome.FAILED, False, 2)
    with pytest.raises(api.UsageError):
        api.status(config, ["not_an_alias"])


def test_outcomes_carry_the_cli_exit_codes() -> None:
    assert [api.Outcome.of_exit_code(c) for c in (0, 1, 3)] == [
        api.Outcome.DONE,
        api.Outcome.DONE_WITH_ERRORS,
        api.Outcome.FAILED,
    ]
    assert [o.exit_code for o in api.Outcome] == [0, 1, 3, 3]


@pytest.mark.slow
def test_the_readme_example_runs_as_a_scheduler_runs_it(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the README has a Python example under 'From Python'"
    make_shop(tmp_path, PRODUCTS, partition_size=100)
    script = code[1] + textwrap.dedent(
        """
        print("indexed", rebuild_products())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"indexed {PRODUCTS}"
