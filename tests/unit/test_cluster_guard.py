"""SQLite cannot coordinate a Spark cluster: the reindex refuses before touching anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkindex.config import parse_pipeline
from sparkindex.errors import ConfigError
from sparkindex.jobs.reindex import ReindexJob

YAML = """
source: {url: "sqlite:///shop.db"}
spark: {master: "spark://spark-master:7077"}
indexes: [{alias: products, table: products}]
"""


def test_sqlite_store_refused_on_a_cluster(tmp_path: Path) -> None:
    pipeline = parse_pipeline(YAML, origin="p.yaml", base_dir=tmp_path)
    with pytest.raises(ConfigError) as err:
        ReindexJob(pipeline).run()
    message = str(err.value)
    assert "coordination.url" in message and "spark://spark-master:7077" in message and "SQLite" in message
    assert not (tmp_path / ".sparkindex").exists(), "nothing was created"


def test_cli_exit_code_2(tmp_path: Path, cli: Path) -> None:
    (tmp_path / "p.yaml").write_text(YAML, encoding="utf-8")
    res = subprocess.run(
        [str(cli), "reindex", "-c", str(tmp_path / "p.yaml")], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2, res.stderr
    assert "SQLite cannot coordinate a Spark cluster" in res.stderr.replace("\n", " ")
