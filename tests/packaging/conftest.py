"""sparkindex as a user installs it: the wheel built from this tree, in a fresh venv outside it.

``wheel`` builds the wheel once per session (from a copy of the tree, so the build leaves nothing in
the repository and two sessions never share a build folder). ``postgres_venv`` is a virtualenv with
``sparkindex[postgres]`` installed from it and nothing else: reuse it (venv-pack it, run its
``sparkindex``) wherever a test needs the installed package rather than the source tree.
``installed_env`` is the environment to run its commands in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: what a build reads: the project file, the readme it names, the package
BUILD_INPUTS = ("pyproject.toml", "README.md", "src")

#: variables that would point an installed sparkindex back at this tree or at the test venv's
#: interpreter (make test exports PYSPARK_PYTHON; Spark workers must run the installed venv's)
LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")


@dataclass(frozen=True)
class InstalledVenv:
    """A virtualenv with the wheel installed: *root*, the extras it got, and how long it took."""

    root: Path
    extras: str
    install_seconds: float

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def python(self) -> Path:
        return self.bin("python")

    @property
    def sparkindex(self) -> Path:
        return self.bin("sparkindex")


def installed_env(venv: InstalledVenv) -> dict[str, str]:
    """This process's environment with *venv* first on PATH and nothing that leads back here."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV}
    env["PATH"] = f"{venv.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def build_wheel(out: Path) -> Path:
    """The wheel of this tree, built into *out* from a copy of what a build reads."""
    tree = out / "tree"
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
        else:
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    wheels = out / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(tree)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = wheels.glob("sparkindex-*.whl")
    return wheel


def install_venv(wheel: Path, extras: str, root: Path) -> InstalledVenv:
    """A fresh virtualenv at *root* with ``wheel[extras]`` and its dependencies from the index.

    Cheap on purpose: the venv gets no pip of its own (this venv's pip installs into it with
    ``--python``) and nothing is byte-compiled ahead (Python compiles what it imports, once)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q", "--no-compile",
         requirement],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pip install {requirement} failed:\n{done.stdout}\n{done.stderr}")
    return InstalledVenv(root, extras, time.monotonic() - started)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sparkindex wheel of this tree (built once per session)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def postgres_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> InstalledVenv:
    """A virtualenv outside the repository with ``sparkindex[postgres]`` installed from the wheel."""
    return install_venv(wheel, "postgres", tmp_path_factory.mktemp("venv-postgres") / "venv")
