"""Reading the YAML pipeline file, with ``${VAR}`` interpolation and located error messages."""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sparkindex.config.model import STATE_DIR_ENV, Pipeline
from sparkindex.config.secrets import redact_url
from sparkindex.errors import ConfigError

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def format_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def interpolate(node: Any, env: Mapping[str, str], origin: str, loc: tuple[int | str, ...] = ()) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string value; a missing VAR is an error."""
    if isinstance(node, dict):
        return {k: interpolate(v, env, origin, (*loc, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env, origin, (*loc, i)) for i, v in enumerate(node)]
    if isinstance(node, str):

        def repl(m: re.Match[str]) -> str:
            name = m["name"]
            if name in env:
                return env[name]
            if m["default"] is not None:
                return m["default"]
            raise ConfigError(
                f"{origin}: {format_path(loc)}: environment variable {name!r} is not set "
                f"(use ${{{name}:-default}} for an optional value)"
            )

        return _VAR.sub(repl, node)
    return node


def parse_pipeline(
    text: str,
    *,
    origin: str = "<pipeline>",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    state_dir: Path | None = None,
) -> Pipeline:
    """The pipeline in *text*: ``${VAR}`` taken from *env* (default: the process's environment),
    relative paths anchored at *base_dir*, state kept in *state_dir* (default: the environment's
    ``SPARKINDEX_STATE_DIR``, else ``.sparkindex`` in *base_dir*)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{origin}: invalid YAML at {where}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level, got {type(raw).__name__}")
    environ = os.environ if env is None else env
    raw = interpolate(raw, environ, origin)
    try:
        pipeline = Pipeline.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("\n".join(_describe(err, origin) for err in exc.errors())) from None
    if state_dir is None and environ.get(STATE_DIR_ENV):
        state_dir = Path(environ[STATE_DIR_ENV])
    return pipeline.bind(base_dir or Path.cwd(), origin, state_dir)


def _describe(err: Any, origin: str) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        # Never echo the value: an unknown key may be a misplaced `password:`.
        known = _known_keys(loc[:-1])
        hint = f" (expected one of: {', '.join(known)})" if known else ""
        return f"{origin}: {format_path(loc)}: unknown key{hint}"
    got = err.get("input")
    # Nor values that may be secrets (URLs), nor whole sections.
    hide = isinstance(got, dict | list) or got is None
    shown = "" if hide else f" (got {redact_url(repr(got))})"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{origin}: {format_path(loc)}: {msg}{shown}"


def _model_in(annotation: Any) -> Any:
    """The model, list or dict type inside ``X | None`` / ``Annotated[X, ...]``."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, dict):
        return annotation
    return None


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model at *loc* (a path into the pipeline) accepts, for "did you mean"."""
    node: Any = Pipeline
    for part in loc:
        origin = typing.get_origin(node)
        if origin is list and isinstance(part, int):
            node = _model_in(typing.get_args(node)[0])
        elif origin is dict:
            node = _model_in(typing.get_args(node)[1])
        elif isinstance(node, type) and issubclass(node, BaseModel) and part in node.model_fields:
            node = _model_in(node.model_fields[str(part)].annotation)
        else:
            return []
        if node is None:
            return []
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []


def load_pipeline(path: str | Path, env: Mapping[str, str] | None = None, state_dir: Path | None = None) -> Pipeline:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: pipeline file not found") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read pipeline file: {exc.strerror}") from None
    return parse_pipeline(text, origin=str(p), base_dir=p.resolve().parent, env=env, state_dir=state_dir)
