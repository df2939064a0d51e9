"""The configuration reference (``docs/configuration.md``), generated from the pipeline model.

``python -m sparkindex.config.reference > docs/configuration.md`` writes it; the output depends on
the model alone (field order, types, defaults, constraints, descriptions and section docstrings),
so a test regenerates it and fails when the committed file drifts.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sparkindex.config.base import _as_list
from sparkindex.config.model import Pipeline

COMMAND = "python -m sparkindex.config.reference > docs/configuration.md"

_HEADER = f"""\
# Configuration reference

<!-- Generated from the pipeline model (src/sparkindex/config/) by
     `{COMMAND}`.
     Do not edit by hand: change the model's descriptions and regenerate. -->

A pipeline is one YAML file (`sparkindex init` writes one from a database's schema). This page
lists every key sparkindex reads, section by section, with its type, its default and what it does.

- Unknown keys are refused with their path (`pipeline.yaml: indexes[0].partition_sise: ...`), so a
  typo never passes silently; only the server-side definitions noted below keep keys they do not know.
- `${{VAR}}` and `${{VAR:-default}}` in any string are replaced from the environment; a missing `VAR`
  is an error. Use them for passwords: URLs and target options are never printed with their secrets.
- Relative paths (`sqlite:///shop.db`, `tantivy://index`, certificate files) are relative to the
  pipeline file, not to the directory the command runs in.
- A path such as `indexes[].relations[]` means "each entry of the list"; `<name>` stands for a key
  you choose.
- The options under `target.options` belong to each backend and are listed in
  [targets.md](targets.md#options).
"""


@dataclass(frozen=True)
class Section:
    path: str
    model: type[BaseModel]


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top-level"


def _link(path: str) -> str:
    return f"[`{path}`](#{_anchor(path)})"


def _rst_to_markdown(text: str) -> str:
    """Docstrings use reST roles and literals; the reference is Markdown."""
    text = re.sub(r":(?:mod|class|meth|func|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _docstring(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__")
    return _rst_to_markdown(inspect.cleandoc(doc)) if doc else ""


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _has_fields(tp: Any) -> bool:
    return _is_model(tp) and bool(tp.model_fields)


def _is_key_columns(metadata: list[Any]) -> bool:
    return any(isinstance(m, BeforeValidator) and m.func is _as_list for m in metadata)


class _Walker:
    """Types as words, and the sections nested models make, found depth-first in field order."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.seen: dict[type[BaseModel], str] = {}

    def visit(self, path: str, model: type[BaseModel]) -> None:
        if model in self.seen:
            return
        self.seen[model] = path
        self.sections.append(Section(path, model))
        for name, field in model.model_fields.items():
            for sub_path, sub_model in self._nested(self._join(path, name), field.annotation):
                self.visit(sub_path, sub_model)

    @staticmethod
    def _join(path: str, name: str) -> str:
        return f"{path}.{name}" if path else name

    def _nested(self, path: str, tp: Any) -> Iterator[tuple[str, type[BaseModel]]]:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Annotated:
            yield from self._nested(path, args[0])
        elif origin in (typing.Union, types.UnionType):
            for arg in args:
                yield from self._nested(path, arg)
        elif origin is list:
            yield from self._nested(f"{path}[]", args[0])
        elif origin is dict:
            yield from self._nested(f"{path}.<{_dict_key_name(path)}>", args[1])
        elif _has_fields(tp):
            yield path, tp

    def section_link(self, model: type[BaseModel]) -> str:
        path = self.seen.get(model)
        return _link(path) if path is not None else model.__name__

    def type_words(self, tp: Any, metadata: list[Any] = []) -> str:  # noqa: B006 - never mutated
        if _is_key_columns(metadata):
            return "column or list of columns"
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Annotated:
            return self.type_words(args[0], list(args[1:]))
        if origin is Literal:
            return "one of " + ", ".join(f"`{json.dumps(a)}`" if not isinstance(a, str) else f"`{a}`" for a in args)
        if origin in (typing.Union, types.UnionType):
            words = [self.type_words(a) for a in args if a is not type(None)]
            if type(None) in args:
                words.append("null")
            return " or ".join(words)
        if origin is list:
            return f"list of {_plural(self.type_words(args[0]))}"
        if origin is dict:
            if args[1] is Any:
                return "mapping"
            inner = self.type_words(args[1])
            return f"map to {inner}" if " or " in inner else f"map of {_plural(inner)}"
        if _has_fields(tp):
            return self.section_link(tp)
        if _is_model(tp):
            return "definition (passed to the server as written)"
        return _SCALARS.get(tp, getattr(tp, "__name__", str(tp)))


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any value"}


def _plural(words: str) -> str:
    for single in ("string", "integer", "number", "mapping"):
        if words == single:
            return f"{single}s"
    if words.startswith("definition"):
        return words.replace("definition", "definitions", 1)
    return words


def _dict_key_name(path: str) -> str:
    leaf = path.rsplit(".", 1)[-1]
    return {"fields": "field", "tables": "table"}.get(leaf, "name")


def _constraints(field: FieldInfo) -> list[str]:
    out: list[str] = []
    for m in field.metadata:
        if isinstance(m, at.Gt):
            out.append(f"`> {m.gt}`")
        elif isinstance(m, at.Ge):
            out.append(f"`>= {m.ge}`")
        elif isinstance(m, at.Lt):
            out.append(f"`< {m.lt}`")
        elif isinstance(m, at.Le):
            out.append(f"`<= {m.le}`")
        elif isinstance(m, at.MinLen):
            out.append(f"at least {m.min_length}")
        elif isinstance(m, at.MaxLen):
            out.append(f"at most {m.max_length} long")
        elif getattr(m, "pattern", None) is not None:
            out.append(f"matching `{m.pattern}`")
    return out


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "its defaults"
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    """One table cell: on one line, pipes escaped, and ``<name>`` outside code shown, not taken for HTML."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    parts[::2] = [p.replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]]
    return "`".join(parts)


def render() -> str:
    """The whole reference, as Markdown."""
    walker = _Walker()
    walker.visit("", Pipeline)
    out = [_HEADER, "## Sections\n"]
    out += [f"- {_link(s.path or 'top level')}" for s in walker.sections]
    for section in walker.sections:
        title = section.path or "top level"
        out += ["", f'<a id="{_anchor(title)}"></a>', "", f"## `{title}`", ""]
        doc = _docstring(section.model)
        if doc:
            out += [doc, ""]
        if section.model.model_config.get("extra") == "allow":
            out += ["Keys not listed here are passed to the server as written.", ""]
        out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in section.model.model_fields.items():
            kind = walker.type_words(field.annotation, list(field.metadata))
            limits = _constraints(field)
            if _has_fields(field.annotation):
                kind = f"section {kind}"
            if limits:
                kind += ", " + ", ".join(limits)
            description = _rst_to_markdown(field.description or "")
            key = field.alias or name  # what the YAML says (`from`), not the Python name (`from_`)
            out.append(f"| `{key}` | {_cell(kind)} | {_cell(_default(field))} | {_cell(description)} |")
    return "\n".join(out) + "\n"


def undocumented() -> list[str]:
    """Config paths of fields without a description (the reference would leave them bare)."""
    walker = _Walker()
    walker.visit("", Pipeline)
    return [
        f"{s.path}.{name}" if s.path else name
        for s in walker.sections
        for name, field in s.model.model_fields.items()
        if not field.description
    ]


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
