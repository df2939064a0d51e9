"""The CLI and the server are thin clients of ``sparkindex.api``: no command module reaches a job,
a store, a source or a target itself, and what a command prints as ``--json`` is the api's result."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import orjson

from sparkindex import api
from tests.e2e.shop import make_shop

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkindex"
#: what only the api may reach: the jobs, and the resources they open
FORBIDDEN_IN_CLI = re.compile(r"ReindexJob|SyncRun|run_verify|Verifier|CoordinationStore\(|open_target\(|open_source\(")
#: the jobs, as the server would start or read them without the api
FORBIDDEN_IN_SERVER = re.compile(
    r"ReindexJob|SyncRun|run_verify|Verifier|run_scheduled_verify|next_verify_at|collect_garbage|request_stop\("
    r"|jobs\.redrive|jobs\.explain|jobs\.status"
)


def offending(folder: Path, pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_cli_command_does_the_work_itself() -> None:
    assert offending(SRC / "cli", FORBIDDEN_IN_CLI) == []


def test_the_server_reaches_jobs_only_through_the_api() -> None:
    assert offending(SRC / "server", FORBIDDEN_IN_SERVER) == []


def run_cli(cli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=300)


def test_explain_json_is_the_api_result(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, 30, partition_size=10)
    config = tmp_path / "pipeline.yaml"
    run = run_cli(cli, "explain", "-c", str(config), "--id", "4", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    printed = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert printed == orjson.loads(orjson.dumps(api.explain(config, doc_id="4").to_dict()))


def test_verify_refused_by_its_preflight_prints_the_lines_of_check(tmp_path: Path, cli: Path) -> None:
    """The preflight is the api's, by default, for verify as for reindex: the refusal quotes the
    failed checks as `check` prints them, at the start of a line, and exits 2 before Spark starts."""
    make_shop(tmp_path, 10, partition_size=10)
    config = tmp_path / "pipeline.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("table: products", "table: no_such_table"), "utf-8")
    checked = run_cli(cli, "check", "-c", str(config))
    expected = [line for line in checked.stdout.splitlines() if line.startswith("FAIL ")]
    assert expected, checked.stdout

    run = run_cli(cli, "verify", "-c", str(config), "--json")
    assert run.returncode == 2, run.stderr[-3000:]
    assert [line for line in run.stderr.splitlines() if line.startswith("FAIL ")] == expected, run.stderr
    assert "preflight refused the run" in run.stderr and run.stdout.strip() == ""
    assert not (tmp_path / ".sparkindex" / "spark.log").exists(), "Spark never started"


def test_stop_with_nothing_running_is_a_usage_error(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, 10, partition_size=10)
    run = run_cli(cli, "stop", "-c", str(tmp_path / "pipeline.yaml"))
    assert run.returncode == 2 and "no running job for products" in run.stderr, run.stderr
