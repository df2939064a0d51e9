"""Reading the YAML pipeline file, with ``${VAR}`` interpolation and located error messages."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sparkindex.config.model import Pipeline
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
    text: str, *, origin: str = "<pipeline>", base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Pipeline:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{origin}: invalid YAML at {where}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level, got {type(raw).__name__}")
    raw = interpolate(raw, os.environ if env is None else env, origin)
    try:
        pipeline = Pipeline.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            got = err.get("input")
            # Never echo values that may be secrets: unknown keys (a misplaced `password:`) or URLs.
            hide = isinstance(got, dict | list) or got is None or err["type"] == "extra_forbidden"
            shown = "" if hide else f" (got {redact_url(repr(got))})"
            lines.append(f"{origin}: {format_path(tuple(err['loc']))}: {err['msg']}{shown}")
        raise ConfigError("\n".join(lines)) from None
    return pipeline.bind(base_dir or Path.cwd(), origin)


def load_pipeline(path: str | Path, env: Mapping[str, str] | None = None) -> Pipeline:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: pipeline file not found") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read pipeline file: {exc.strerror}") from None
    return parse_pipeline(text, origin=str(p), base_dir=p.resolve().parent, env=env)
