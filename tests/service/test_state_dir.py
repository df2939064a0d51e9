"""A pipeline folder that is only read: with ``SPARKINDEX_STATE_DIR`` (or ``--state-dir``) set, a
reindex, a sync and a verify write nothing beside the pipeline file (a Kubernetes ConfigMap, a
read-only mount). Tests run as root, which ignores permission bits, so the folder's contents are
compared, not its mode: every name, size, mtime and byte, before and after."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.capture.helpers import Shop, drop_pg_shop, make_pg_shop

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under *folder* (hidden ones included): path -> (size, mtime_ns, sha256)."""
    found: dict[str, tuple[int, int, str]] = {}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        found[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns, digest)
    stat = folder.stat()
    found["."] = (0, stat.st_mtime_ns, "dir")
    return found


@pytest.fixture
def shop(tmp_path: Path, services: dict[str, str]) -> Iterator[Shop]:
    shop = make_pg_shop(tmp_path / "data", services["postgres"], products=60)
    yield shop
    drop_pg_shop(shop, services["postgres"])


def read_only_pipeline(shop: Shop, folder: Path, index: Path) -> Path:
    """The shop's pipeline alone in *folder*: the default store (no ``coordination:``) and an
    absolute index path, so that nothing it names is inside the folder."""
    text = (shop.directory / "pipeline.yaml").read_text(encoding="utf-8")
    text = text.replace("coordination:\n  url: sqlite:///.sparkindex/state.db\n", "")
    text = text.replace("url: tantivy://index", f"url: tantivy://{index}")
    assert "coordination:" not in text and f"tantivy://{index}" in text
    folder.mkdir()
    (folder / "pipeline.yaml").write_text(text, encoding="utf-8")
    return folder / "pipeline.yaml"


def run(cli: Path, *args: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([str(cli), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (args, done.returncode, done.stderr[-3000:])
    last = done.stdout.strip().splitlines()[-1] if "--json" in args else "{}"
    return dict(orjson.loads(last))


def test_reindex_sync_and_verify_leave_the_pipeline_folder_as_they_found_it(
    shop: Shop, tmp_path: Path, cli: Path
) -> None:
    config = read_only_pipeline(shop, tmp_path / "config", tmp_path / "index")
    state = tmp_path / "state"
    env = {**os.environ, "SPARKINDEX_STATE_DIR": str(state)}
    before = snapshot(config.parent)
    # the working directory is the pipeline's folder too, as a service unit's often is
    summary = run(cli, "reindex", "-c", str(config), "--json", cwd=config.parent, env=env)
    assert summary["status"] == "COMPLETED" and summary["indexed"] == 60, summary
    shop.sql("UPDATE products SET name = 'Zoë, renamed; again' WHERE id = 7")
    shop.sql("DELETE FROM reviews WHERE product_id = 9")
    synced = run(cli, "sync", "-c", str(config), "--until-caught-up", "--json", cwd=config.parent, env=env)
    assert synced["applied"] >= 1, synced
    # --state-dir says the same as the variable (here without it in the environment)
    plain = {k: v for k, v in os.environ.items() if k != "SPARKINDEX_STATE_DIR"}
    report = run(cli, "verify", "-c", str(config), "--state-dir", str(state), "--json", cwd=config.parent, env=plain)
    assert [report[k] for k in ("missing", "extra", "stale", "duplicates")] == [0, 0, 0, 0], report
    assert report["checked"] == 60, report

    assert snapshot(config.parent) == before
    # what used to land in .sparkindex/ beside the pipeline is in the state folder instead
    assert (state / "state.db").is_file() and (state / "spark.log").is_file()


def test_without_a_state_dir_the_state_stays_beside_the_pipeline(shop: Shop, tmp_path: Path, cli: Path) -> None:
    """The default is unchanged: an operator who sets nothing finds ``.sparkindex/`` where it was
    (and the test above would pass vacuously if state went elsewhere regardless)."""
    config = read_only_pipeline(shop, tmp_path / "config", tmp_path / "index")
    env = {k: v for k, v in os.environ.items() if k != "SPARKINDEX_STATE_DIR"}
    run(cli, "reindex", "-c", str(config), "--json", cwd=tmp_path, env=env)
    assert (config.parent / ".sparkindex" / "state.db").is_file()
