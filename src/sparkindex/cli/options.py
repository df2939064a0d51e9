"""The options every command that reads a pipeline takes, spelled once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkindex.config.model import STATE_DIR_ENV

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="pipeline YAML file")]
IndexOpt = Annotated[list[str] | None, typer.Option("--index", "-i", help="alias (repeatable); default all")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object on the last line")]
StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar=STATE_DIR_ENV,
        help="where sparkindex keeps its own files (default store, logs); default: .sparkindex beside the "
        "pipeline file, whose folder is then only read",
    ),
]
