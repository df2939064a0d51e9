"""spark-submit to a cluster that does not share the driver's environment (docs/deploy.md).

The driver's environment is a fresh venv with the wheel installed (``sparkindex[postgres]``), in a
folder only root may enter. The standalone worker runs as an unprivileged user with an environment
of its own (no venv on PATH, no ``PYSPARK_*``): it cannot even start the driver's interpreter, so
an executor that fell back to it (``spark.pyspark.python`` unset, or overridden with the driver's
path) fails its tasks and the run with them. The venv is packed with venv-pack and shipped as
``--archives env.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python`` (Spark's
recipe); the reindex, run by spark-submit through sparkindex's entry file, exits 0, and the
executors' imports compiled sparkindex inside the unpacked archive. ``sparkindex verify``, run
directly with the archive named in the pipeline's ``spark.conf`` instead, is clean.

The index folder is shared between the driver (root) and the executors' user: the driver runs
with umask 0, so what it creates there the executors may write. Cheap on purpose: one table of
2,000 rows, one worker with one core, one venv built per module; the packed venv leaves out
pyspark's jars (the executors run the cluster's Spark).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from tests.cli_process import LoggedProcess
from tests.cluster.standalone import StandaloneCluster
from tests.e2e.shop import drop_database, fresh_database
from tests.packaging.conftest import LEAKY_ENV, build_wheel

# Not marked ``cluster`` (which sends a test to make test's serial phase): its cluster is one worker
# of one core, light enough to run beside the parallel phase's tests, and nothing it does depends on
# timing (no lease expiry, no kill).
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

WORKER_USER = "sparkindex-worker"
ROWS = 2_000
#: the executors run the cluster's Spark: the packed venv needs pyspark's Python, not its 460 MB of jars
NO_JARS = "lib/python*/site-packages/pyspark/jars/*"


def worker_user() -> pwd.struct_passwd:
    """The workers' unprivileged user, added (a system user, no home, no shell) when missing."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("the workers run as another user: needs root and useradd")
    try:
        return pwd.getpwnam(WORKER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
             WORKER_USER],
            check=True,
        )  # fmt: skip
        return pwd.getpwnam(WORKER_USER)


def as_worker(args: list[str], cwd: str = "/") -> subprocess.CompletedProcess[str]:
    """*args* run as the workers' user, in an environment like theirs."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    user = pwd.getpwnam(WORKER_USER)
    return subprocess.run(
        args, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=cwd,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def executor_python() -> str:
    """An interpreter the executors' user can run, as a cluster's machines have one: the venv is
    built from it, so the packed venv's ``bin/python`` (a link to it) resolves on the executors."""
    for candidate in (f"/usr/bin/python3.{sys.version_info.minor}", "/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.exists(candidate):
            continue
        ran = as_worker([candidate, "-c", "import sys; print(sys.version_info >= (3, 11))"])
        if ran.returncode == 0 and ran.stdout.strip() == "True":
            return candidate
    pytest.skip("no Python 3.11+ that an unprivileged user can run (/usr/bin/python3)")


@dataclass(frozen=True)
class Shipped:
    venv: Path  #: the driver's environment, in a folder only root may enter
    archive: Path  #: the same venv, packed
    seconds: float  #: wheel, venv and pack

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def spark_home(self) -> Path:
        [home] = self.venv.glob("lib/python*/site-packages/pyspark")
        return home

    def entry(self) -> str:
        """What docs/deploy.md has spark-submit run: the installed package's ``__main__.py``."""
        code = "import sparkindex.__main__ as m; print(m.__file__)"
        return subprocess.run([str(self.python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    worker_user()
    base = executor_python()
    started = time.monotonic()
    root = tmp_path_factory.mktemp("packed")
    wheel = build_wheel(root / "wheel")
    venv = root / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile"]
    done = subprocess.run([*pip, f"{wheel}[postgres]"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    archive = root / "env.tar.gz"
    venv_pack = Path(sys.executable).parent / "venv-pack"
    subprocess.run(
        [str(venv_pack), "-p", str(venv), "-o", str(archive), "--compress-level", "1", "--exclude", NO_JARS, "-q"],
        check=True,
    )
    return Shipped(venv, archive, time.monotonic() - started)


@dataclass(frozen=True)
class Place:
    """A folder outside pytest's (which only root may enter), removed afterwards."""

    root: Path
    cluster: StandaloneCluster

    @property
    def pipeline_dir(self) -> Path:
        return self.root / "pipeline"

    def executor_errors(self) -> str:
        """The end of each executor's stderr: where a task's failure to start Python is told."""
        return "\n".join(
            f"{path}:\n{path.read_text(errors='replace')[-3000:]}" for path in self.root.glob("work/app-*/*/stderr")
        )


@pytest.fixture
def place() -> Iterator[Place]:
    user = worker_user()
    root = Path(tempfile.mkdtemp(prefix="sparkindex-packed-"))
    try:
        root.chmod(0o755)
        (root / "cluster").mkdir()
        work = root / "work"  # SPARK_WORKER_DIR: the executors' folders, the unpacked archive
        work.mkdir()
        os.chown(work, user.pw_uid, user.pw_gid)
        (root / "pipeline").mkdir(mode=0o777)
        (root / "pipeline").chmod(0o777)  # the driver writes the index there, and so do the executors
        cluster = StandaloneCluster(root / "cluster", workers=1, user=WORKER_USER, worker_dir=work).start()
        try:
            yield Place(root, cluster)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def items(services: dict[str, str]) -> Iterator[str]:
    """A fresh PostgreSQL database with one table of ROWS rows; its ``postgresql://`` URL."""
    url = fresh_database(services["postgres"], "packed_env")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price numeric(8,2))")
        conn.exec_driver_sql(
            "INSERT INTO items SELECT i, 'item ' || i, i / 7.0 FROM generate_series(1, %(n)s) AS i", {"n": ROWS}
        )
    engine.dispose()
    try:
        yield url.replace("postgresql+psycopg://", "postgresql://", 1)
    finally:
        drop_database(services["postgres"], "packed_env")


def pipeline_text(url: str, master: str, conf: dict[str, str] | None = None) -> str:
    spark = f"spark:\n  master: {master}\n"
    if conf:
        spark += "  conf:\n" + "".join(f"    {key}: '{value}'\n" for key, value in conf.items())
    return (
        f"source:\n  url: {url}\n"
        "target:\n  url: tantivy://index\n"
        f"coordination:\n  url: {url}\n  prefix: packed_\n"
        f"{spark}"
        "indexes:\n  - alias: items\n    table: items\n    partition_size: 500\n"
    )


def driver_env(shipped: Shipped, **extra: str) -> dict[str, str]:
    """The driver's environment: nothing that leads to the test venv or this tree."""
    env = {key: value for key, value in os.environ.items() if key not in LEAKY_ENV}
    env["PATH"] = f"{shipped.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def test_spark_submit_ships_the_environment_to_workers_that_cannot_see_the_drivers(
    shipped: Shipped, place: Place, items: str
) -> None:
    started = time.monotonic()
    # The executors' user cannot start the driver's interpreter: a fallback to it cannot work.
    with pytest.raises(PermissionError):
        as_worker([str(shipped.python), "-c", "import sparkindex"])

    folder = place.pipeline_dir
    config = folder / "pipeline.yaml"
    config.write_text(pipeline_text(items, place.cluster.url), encoding="utf-8")
    spark_home = shipped.spark_home()
    env = driver_env(
        shipped,
        SPARK_HOME=str(spark_home),
        PYSPARK_DRIVER_PYTHON=str(shipped.python),
        PYSPARK_PYTHON="./environment/bin/python",
    )
    submit = LoggedProcess(
        [
            str(spark_home / "bin" / "spark-submit"),
            "--master",
            place.cluster.url,
            "--archives",
            f"{shipped.archive}#environment",
            shipped.entry(),
            "reindex",
            "-c",
            str(config),
            "--json",
        ],
        place.root / "logs",
        cwd=folder,
        env=env,
        umask=0,
        start_new_session=True,
    )
    try:
        out, err = submit.communicate(timeout=600)
    finally:
        submit.kill_group()
    assert submit.returncode == 0, err[-3000:] + place.executor_errors()
    summary = orjson.loads(out.strip().splitlines()[-1])
    assert (summary["status"], summary["indexed"], summary["source_rows"]) == ("COMPLETED", ROWS, ROWS)

    # The executors imported sparkindex from the unpacked archive (the venv was installed without
    # byte-code, so the compiled modules there are theirs), as the workers' user.
    compiled = list(
        place.root.glob("work/app-*/*/environment/lib/python3.*/site-packages/sparkindex/spark/__pycache__")
    )
    assert compiled, "no executor imported sparkindex from the shipped environment"
    assert compiled[0].stat().st_uid == pwd.getpwnam(WORKER_USER).pw_uid
    submitted = time.monotonic() - started

    # Without spark-submit: the archive and the interpreter named in the pipeline's spark.conf.
    archived = folder / "archived.yaml"
    conf = {"spark.archives": f"{shipped.archive}#environment", "spark.pyspark.python": "./environment/bin/python"}
    archived.write_text(pipeline_text(items, place.cluster.url, conf), encoding="utf-8")
    verify = subprocess.run(
        [str(shipped.venv / "bin" / "sparkindex"), "verify", "-c", str(archived), "--json"],
        cwd=folder, env=driver_env(shipped), umask=0, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr[-3000:] + place.executor_errors()
    report = orjson.loads(verify.stdout.strip().splitlines()[-1])
    assert (report["missing"], report["extra"], report["stale"], report["checked"]) == (0, 0, 0, ROWS)
    print(
        f"packed environment: wheel+venv+pack {shipped.seconds:.1f}s, spark-submit reindex {submitted:.1f}s, "
        f"verify {time.monotonic() - started - submitted:.1f}s"
    )
