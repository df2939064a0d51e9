"""``sparkindex check`` as a user runs it: the JSON shape, exit codes 0/1/2, secrets never shown;
and ``reindex``/``sync`` refusing to start with the very lines ``check`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.shop import make_shop
from tests.preflight.helpers import JSON_KEYS, check_json, closed_port, fail_lines, run_cli


def _cluster_pipeline(directory: Path) -> Path:
    """The shop with its default SQLite store, run on a Spark cluster master (nothing listens there)."""
    make_shop(directory, products=20, partition_size=10)
    path = directory / "pipeline.yaml"
    text = path.read_text(encoding="utf-8").replace("master: local[2,4]", f"master: spark://127.0.0.1:{closed_port()}")
    path.write_text(text, encoding="utf-8")
    return path


def test_json_shape_and_exit_codes(tmp_path: Path, cli: Path) -> None:
    make_shop(tmp_path, products=20, partition_size=10)
    config = tmp_path / "pipeline.yaml"

    run, body = check_json(cli, config)
    assert run.returncode == 0, run.stderr
    assert set(body) == {"checks", "ok"} and body["ok"] is True
    assert all(set(c) == JSON_KEYS for c in body["checks"]), body
    assert {c["status"] for c in body["checks"]} == {"OK"}, body
    names = [c["name"] for c in body["checks"]]
    for expected in ("source.reachable", "source.select:reviews", "source.id:products", "store.writable"):
        assert expected in names, names
    assert {"target.disk", "spark.master", "spark.java"} <= set(names)
    assert not (tmp_path / ".sparkindex").exists() and not (tmp_path / "index").exists(), "check writes nothing"

    run, body = check_json(cli, config, "--min-free-disk-gb", "1000000")  # more than any disk here
    assert run.returncode == 1, run.stderr
    assert body["ok"] is True, "warnings alone do not stop a run"
    disk = next(c for c in body["checks"] if c["name"] == "target.disk")
    assert disk["status"] == "WARN" and disk["fix"], disk

    run, body = check_json(cli, config, "--index", "nope")  # an unknown alias: the same JSON shape
    assert run.returncode == 2 and body["ok"] is False, run.stderr
    assert [(c["name"], c["status"]) for c in body["checks"]] == [("index", "FAIL")]
    assert "'nope'" in body["checks"][0]["detail"] and "products" in body["checks"][0]["detail"]

    run, body = check_json(cli, _cluster_pipeline(tmp_path / "cluster"))
    assert run.returncode == 2, run.stderr
    assert body["ok"] is False
    failed = {c["name"]: c for c in body["checks"] if c["status"] == "FAIL"}
    assert set(failed) == {"store.cluster", "spark.master"}, failed
    assert "SQLite cannot coordinate a Spark cluster" in failed["store.cluster"]["detail"]
    assert "postgresql://" in failed["store.cluster"]["fix"]


def test_lines_are_one_per_check_and_say_how_to_fix(tmp_path: Path, cli: Path) -> None:
    config = _cluster_pipeline(tmp_path)
    run = run_cli(cli, "check", "-c", str(config))
    assert run.returncode == 2, run.stderr
    lines = run.stdout.strip().splitlines()
    assert all(line.split(" ", 1)[0] in ("OK", "WARN", "FAIL") for line in lines), lines
    assert len(fail_lines(run.stdout)) == 2 and all(" | fix: " in line for line in fail_lines(run.stdout))
    assert "2 FAIL" in run.stderr


@pytest.mark.slow
def test_reindex_fails_fast_with_the_lines_of_check(tmp_path: Path, cli: Path) -> None:
    config = _cluster_pipeline(tmp_path)
    checked = run_cli(cli, "check", "-c", str(config))
    store_line = next(line for line in fail_lines(checked.stdout) if line.startswith("FAIL store.cluster:"))

    run = run_cli(cli, "reindex", "-c", str(config), "--json")
    assert run.returncode == 2, run.stderr[-3000:]
    assert store_line in run.stderr.splitlines(), run.stderr
    # a master that does not answer may be restarting: the run meets it and says so (exit 3), the
    # guard does not turn it into a configuration error, but it does not hide it either
    master = [line for line in run.stderr.splitlines() if line.startswith("FAIL spark.master:")]
    assert "FAIL spark.master:" in checked.stdout, checked.stdout
    assert master and all(line.endswith("(the run goes on and meets this itself)") for line in master), run.stderr
    assert "preflight check(s) failed" in run.stderr and run.stdout.strip() == ""
    assert not (tmp_path / ".sparkindex").exists() and not (tmp_path / "index").exists(), "nothing was started"


@pytest.mark.slow
def test_sync_fails_fast_with_the_lines_of_check(tmp_path: Path, cli: Path) -> None:
    """Polling by a column the tables do not have: ``sync`` refuses before any Spark starts."""
    make_shop(tmp_path, products=20, partition_size=10)
    config = tmp_path / "pipeline.yaml"
    text = config.read_text(encoding="utf-8").replace(
        "    complexity: 3.0\n", "    complexity: 3.0\n    changes: {column: updated_at}\n"
    )
    config.write_text(text, encoding="utf-8")
    checked = run_cli(cli, "check", "-c", str(config))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    expected = fail_lines(checked.stdout)
    assert expected and all(line.startswith("FAIL polling.column:") for line in expected), expected

    run = run_cli(cli, "sync", "-c", str(config), "--until-caught-up")
    assert run.returncode == 2, run.stderr[-3000:]
    assert [line for line in run.stderr.splitlines() if line.startswith("FAIL ")] == expected, run.stderr
    assert not (tmp_path / ".sparkindex").exists(), "nothing was started"


def test_secrets_never_appear(tmp_path: Path, cli: Path) -> None:
    """Passwords in every URL, servers that refuse connections: the errors drivers quote back
    never carry the password into a line or the JSON."""
    secret = "Sup3rSecretPw"
    port = closed_port()
    (tmp_path / "pipeline.yaml").write_text(
        f"""
source: {{url: "postgresql://app:{secret}@127.0.0.1:{port}/shop"}}
coordination: {{url: "mysql://coord:{secret}@127.0.0.1:{port}/state"}}
target: {{url: "opensearch://admin:{secret}@127.0.0.1:{port}"}}
spark: {{master: "local[2]"}}
indexes: [{{alias: products, table: products}}]
sync: {{source: log}}
""",
        encoding="utf-8",
    )
    run, body = check_json(cli, tmp_path / "pipeline.yaml")
    assert run.returncode == 2, run.stderr
    assert secret not in run.stdout + run.stderr
    failed = {c["name"] for c in body["checks"] if c["status"] == "FAIL"}
    assert {"source.reachable", "store.reachable", "target.reachable"} <= failed, body
    plain = run_cli(cli, "check", "-c", str(tmp_path / "pipeline.yaml"))
    assert plain.returncode == 2 and secret not in plain.stdout + plain.stderr
    assert "app:***@" in plain.stdout, plain.stdout


def test_a_pipeline_that_does_not_load_is_one_failed_check(tmp_path: Path, cli: Path) -> None:
    (tmp_path / "bad.yaml").write_text("source: {url: 'sqlite:///x.db'}\nindexes: []\n", encoding="utf-8")
    run, body = check_json(cli, tmp_path / "bad.yaml")
    assert run.returncode == 2 and body["ok"] is False
    [only] = body["checks"]
    assert (only["name"], only["status"]) == ("config", "FAIL") and "indexes" in only["detail"], only
