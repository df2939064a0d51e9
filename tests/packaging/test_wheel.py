"""The wheel, installed as a user installs it: ``sparkindex[postgres]`` in a fresh venv outside the
repository, run through its own ``sparkindex`` command from a folder outside it too, so nothing
can come from the source tree. A PostgreSQL -> Tantivy pipeline (its store in PostgreSQL too)
reindexes and verifies clean; a pipeline that names an extra this venv lacks stops before Spark
with exit code 2 and one line naming the extra to install."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sparkindex.demo.shop import PIPELINE_YAML, generate_shop
from tests.e2e.shop import copy_shop, drop_database, fresh_database
from tests.packaging.conftest import ROOT, InstalledVenv, installed_env

pytestmark = pytest.mark.slow

PRODUCTS = 300


def run(venv: InstalledVenv, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv.sparkindex), *args], cwd=cwd, env=installed_env(venv), capture_output=True, text=True, timeout=timeout
    )


def python(venv: InstalledVenv, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv.python), "-c", code], cwd=cwd, env=installed_env(venv), capture_output=True, text=True, timeout=120
    )


def write_pipeline(folder: Path, source: str, target: str, store: str | None = None) -> Path:
    """The sample shop's pipeline with *source*, *target* and (or the default SQLite) *store*."""
    text = PIPELINE_YAML.format(partition_size=100).replace("master: local[*,4]", "master: local[2,4]")
    text = text.replace("url: sqlite:///shop.db", f"url: {source}").replace("url: tantivy://index", f"url: {target}")
    if store is not None:
        text = text.replace("url: sqlite:///.sparkindex/state.db", f"url: {store}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pipeline.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def shop_in_postgres(services: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A fresh PostgreSQL database holding the sample shop; its plain ``postgresql://`` URL."""
    name = f"pk_{uuid.uuid4().hex[:10]}"
    generate_shop(tmp_path / "shop.db", PRODUCTS)
    url = fresh_database(services["postgres"], name)
    try:
        copy_shop(tmp_path / "shop.db", url)
        yield url.replace("postgresql+psycopg://", "postgresql://", 1)
    finally:
        drop_database(services["postgres"], name)


def test_the_venv_is_outside_the_tree_and_holds_only_the_postgres_extra(
    postgres_venv: InstalledVenv, tmp_path: Path
) -> None:
    assert not postgres_venv.root.resolve().is_relative_to(ROOT), "the venv must be outside the repository"
    where = python(
        postgres_venv, "import sparkindex, pathlib; print(pathlib.Path(sparkindex.__file__).parent)", tmp_path
    )
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip())
    assert package.is_relative_to(postgres_venv.root), f"sparkindex imported from {package}, not the venv"
    assert (package / "py.typed").is_file(), "py.typed ships in the wheel"
    assert (package / "server" / "static" / "index.html").is_file(), "the page ships in the wheel"
    assert python(postgres_venv, "import psycopg", tmp_path).returncode == 0
    for absent in ("MySQLdb", "pymysqlreplication", "opensearchpy", "elastic_transport", "starlette", "botocore"):
        imported = python(postgres_venv, f"import {absent}", tmp_path)
        assert imported.returncode != 0 and "ModuleNotFoundError" in imported.stderr, f"{absent} is installed"
    helped = run(postgres_venv, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "reindex" in helped.stdout


@pytest.mark.postgres
def test_postgres_to_tantivy_reindexes_and_verifies_clean(
    postgres_venv: InstalledVenv, shop_in_postgres: str, tmp_path: Path
) -> None:
    folder = tmp_path / "pipeline"
    pipeline = write_pipeline(folder, shop_in_postgres, f"tantivy://{folder / 'index'}", store=shop_in_postgres)
    elsewhere = tmp_path / "cwd"  # relative paths resolve from the pipeline file, not from here
    elsewhere.mkdir()

    drafted = run(postgres_venv, "init", "--source", shop_in_postgres, "-o", str(tmp_path / "init.yaml"), cwd=elsewhere)
    assert drafted.returncode == 0, drafted.stderr
    assert "table: products" in (tmp_path / "init.yaml").read_text(encoding="utf-8")
    checked = run(postgres_venv, "check", "-c", str(pipeline), cwd=elsewhere)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    built = run(postgres_venv, "reindex", "-c", str(pipeline), "--json", cwd=elsewhere)
    assert built.returncode == 0, built.stderr[-4000:]
    summary = orjson.loads(built.stdout.strip().splitlines()[-1])
    assert (summary["status"], summary["indexed"], summary["failed"]) == ("COMPLETED", PRODUCTS, 0), summary

    verified = run(postgres_venv, "verify", "-c", str(pipeline), "--json", cwd=elsewhere)
    assert verified.returncode == 0, verified.stderr[-4000:]
    report = orjson.loads(verified.stdout.strip().splitlines()[-1])
    drift = {k: report[k] for k in ("missing", "extra", "stale", "duplicates")}
    assert drift == {"missing": 0, "extra": 0, "stale": 0, "duplicates": 0}, report
    assert (report["checked"], report["clean"]) == (PRODUCTS, True), report


def test_a_missing_extra_stops_the_run_in_one_line(postgres_venv: InstalledVenv, tmp_path: Path) -> None:
    """Neither server needs to exist: the run stops at its preflight, before connecting or starting Spark."""
    mysql = write_pipeline(tmp_path / "mysql", "mysql://indexer@127.0.0.1:9/shop", f"tantivy://{tmp_path / 'index'}")
    generate_shop(tmp_path / "opensearch" / "shop.db", 10)
    opensearch = write_pipeline(tmp_path / "opensearch", "sqlite:///shop.db", "opensearch://127.0.0.1:9")
    cases = [
        (
            mysql,
            "source.url: the MySQL/MariaDB source (mysql://) needs the mysql extra: pip install 'sparkindex[mysql]'",
        ),
        (
            opensearch,
            "target.url: the OpenSearch target (opensearch://) needs the opensearch extra: "
            "pip install 'sparkindex[opensearch]'",
        ),
    ]
    for pipeline, message in cases:
        refused = run(postgres_venv, "reindex", "-c", str(pipeline), cwd=tmp_path, timeout=120)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr, refused.stderr
        assert not (pipeline.parent / ".sparkindex" / "spark.log").exists(), "Spark must not start"
