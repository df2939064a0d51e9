"""What a user's terminal shows: no JVM noise, the JSON summary contract, error text kept intact."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from tests.e2e.guarantee_helpers import run_cli
from tests.e2e.shop import make_shop

SUMMARY_KEYS = {"job_id", "status", "alias", "index", "source_rows", "indexed", "failed", "seconds"}


@pytest.mark.slow
def test_reindex_json_prints_the_summary_contract_and_no_jvm_noise(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, products=400, partition_size=200)
    run = run_cli(cli, "reindex", "-c", str(tmp_path / "pipeline.yaml"), "--json")
    assert run.returncode == 0, run.stderr
    for noise in ("WARN", "log4j", "NativeCodeLoader", "incubator"):
        assert noise not in run.stderr, f"{noise!r} reached the terminal:\n{run.stderr}"
    summary = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert set(summary) == SUMMARY_KEYS
    assert (summary["status"], summary["alias"], summary["index"]) == ("COMPLETED", "products", "products_v1")
    assert (summary["source_rows"], summary["indexed"], summary["failed"]) == (400, 400, 0)
    assert isinstance(summary["job_id"], str) and summary["seconds"] > 0
    assert (tmp_path / ".sparkindex" / "spark.log").exists(), "the JVM's output goes to the log file instead"


def bad_alias_run(tmp_path: Path, cli: Path) -> subprocess.CompletedProcess[str]:
    """``reindex`` on a pipeline whose alias breaks the alias pattern, stderr piped (not a terminal)."""
    make_shop(tmp_path, products=10, partition_size=10)
    path = tmp_path / "pipeline.yaml"
    text = path.read_text(encoding="utf-8")
    assert "  - alias: products\n" in text
    path.write_text(text.replace("  - alias: products\n", '  - alias: "Bad Alias!"\n'), encoding="utf-8")
    return run_cli(cli, "reindex", "-c", str(path), "--json")


def test_a_config_error_with_brackets_is_printed_intact(tmp_path: Path, cli: Path) -> None:
    run = bad_alias_run(tmp_path, cli)
    assert run.returncode == 2, run.stderr
    assert "indexes[0].alias" in run.stderr
    assert r"^[a-z0-9][a-z0-9_\-]*$" in run.stderr, run.stderr  # Rich markup must not eat [a-z0-9]
    assert run.stdout.strip() == "", "no summary for a run that never started"


def test_an_error_message_is_not_rewrapped_when_piped(tmp_path: Path, cli: Path) -> None:
    """Logs and CI capture stderr: the message must arrive as written, the user's value unbroken."""
    run = bad_alias_run(tmp_path, cli)
    assert run.returncode == 2, run.stderr
    line = f"{tmp_path / 'pipeline.yaml'}: indexes[0].alias: String should match pattern"
    assert line in run.stderr, run.stderr
    assert "(got 'Bad Alias!')" in run.stderr, run.stderr
