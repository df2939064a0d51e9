"""What every call takes first: the pipeline, as a path, YAML text or a loaded :class:`Pipeline`;
and the preflight that calls which run a job start with."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from sparkindex.api.progress import Watch
from sparkindex.config import load_pipeline
from sparkindex.config.loader import parse_pipeline
from sparkindex.config.model import Pipeline
from sparkindex.errors import ConfigError

#: a pipeline file's path, its YAML text, or a loaded pipeline
PipelineArg = Pipeline | str | os.PathLike[str]


def load(pipeline: PipelineArg, state_dir: str | os.PathLike[str] | None = None) -> Pipeline:
    """*pipeline* as a :class:`Pipeline`: text that spans lines or is one flow mapping (``{...}``)
    is YAML (relative paths in it are taken from the working directory), anything else a path.

    *state_dir* is where the run keeps what it writes of its own (the default store, logs);
    default: ``SPARKINDEX_STATE_DIR``, else ``.sparkindex`` beside the pipeline file. Pass the
    loaded pipeline to any call to keep its state there."""
    state = None if state_dir is None else Path(state_dir)
    if isinstance(pipeline, Pipeline):
        return pipeline.with_state_dir(state)
    if is_text(pipeline):
        return parse_pipeline(str(pipeline), origin="<pipeline text>", base_dir=Path.cwd(), state_dir=state)
    return load_pipeline(Path(pipeline.strip() if isinstance(pipeline, str) else pipeline), state_dir=state)


def is_text(pipeline: PipelineArg) -> bool:
    """Whether *pipeline* is YAML text rather than a path (see :func:`load`)."""
    if not isinstance(pipeline, str):
        return False
    text = pipeline.strip()
    return "\n" in text or text.startswith("{")


def aliases_of(pipeline: Pipeline, aliases: Sequence[str] | None) -> list[str]:
    """The aliases a call works on (default: all); one the pipeline does not define raises UsageError."""
    from sparkindex.documents.planning import selected_aliases

    return selected_aliases(pipeline, aliases)


def preflight(
    pipeline: Pipeline,
    scope: Literal["reindex", "sync", "documents"],
    aliases: Sequence[str] | None,
    watch: Watch,
    **options: Any,
) -> None:
    """The checks the CLI runs before this kind of run (``sparkindex check``'s, without the probes
    that write). Warnings go to the progress as phases (or to the log); a failure a person must fix
    raises :class:`ConfigError` whose message lists the failed checks, as ``check`` prints them:
    a caller may not see the log."""
    from sparkindex.preflight import guard

    spark = options.pop("spark", None)
    if spark is not None:  # the caller's session says where tasks run, not the pipeline's spark section
        options["session_master"] = str(spark.sparkContext.master)
    lines = io.StringIO()
    try:
        guard(pipeline, scope, aliases, lines, **options)
    except ConfigError as exc:
        raise ConfigError(f"preflight refused the run:\n{lines.getvalue().rstrip()}\n{exc}") from None
    for line in lines.getvalue().splitlines():
        watch.warn(f"preflight: {line}")
