"""Shared fixtures: one SparkSession per test session, and sample shops on disk."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from sparkindex.config.model import SparkConfig
    from sparkindex.spark.session import build_session

    session = build_session(SparkConfig(master="local[2,4]"))
    yield session
    session.stop()


@pytest.fixture
def cli() -> Path:
    """The installed ``sparkindex`` command of this venv."""
    return Path(sys.executable).parent / "sparkindex"
