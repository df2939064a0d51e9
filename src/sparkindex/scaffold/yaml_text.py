"""Writing YAML with comments where they belong, byte for byte the same for the same input.

PyYAML drops comments and ruamel is not a dependency, so this small block-style writer does it:
a tree of mappings, sequences and scalars, each entry or item with comment lines above it, and
entries or items that are written commented out (a proposal the user enables by uncommenting).
:func:`plain_data` gives what the text must load as; the caller checks that it does.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

import yaml

Scalar = str | int | float | bool | None
WIDTH = 110


@dataclass
class Flow:
    """A list of scalars written on one line: ``[a, b]``."""

    items: list[Scalar]


@dataclass
class Comment:
    """Comment lines standing on their own in a mapping or a sequence."""

    lines: list[str]


@dataclass
class Entry:
    key: str
    value: Node
    above: list[str] = field(default_factory=list)
    #: written commented out (and absent from :func:`plain_data`)
    disabled: bool = False


@dataclass
class Map:
    entries: list[Entry | Comment]


@dataclass
class Item:
    value: Node
    above: list[str] = field(default_factory=list)
    disabled: bool = False


@dataclass
class Seq:
    items: list[Item | Comment]


Node = Scalar | Flow | Map | Seq

_PLAIN = re.compile(r"^[\w./][\w./:+\-@%=?&~*,\[\]]*$")


def render(root: Map) -> str:
    out: list[str] = []
    _map(root, 0, out)
    return "\n".join(out) + "\n"


def plain_data(node: Node) -> Any:
    """What :func:`render`'s text loads as (disabled entries and items are comments)."""
    if isinstance(node, Map):
        return {e.key: plain_data(e.value) for e in node.entries if isinstance(e, Entry) and not e.disabled}
    if isinstance(node, Seq):
        return [plain_data(i.value) for i in node.items if isinstance(i, Item) and not i.disabled]
    if isinstance(node, Flow):
        return list(node.items)
    return node


def _map(node: Map, indent: int, out: list[str]) -> None:
    pad = " " * indent
    for entry in node.entries:
        if isinstance(entry, Comment):
            out.extend(comment_lines(entry.lines, indent))
            continue
        out.extend(comment_lines(entry.above, indent))
        start = len(out)
        key = scalar(entry.key, flow=False)
        value = entry.value
        if isinstance(value, Map) and value.entries:
            out.append(f"{pad}{key}:")
            _map(value, indent + 2, out)
        elif isinstance(value, Seq) and value.items:
            out.append(f"{pad}{key}:")
            _seq(value, indent + 2, out)
        else:
            out.append(f"{pad}{key}: {inline(value)}")
        if entry.disabled:
            _disable(out, start, indent)


def _seq(node: Seq, indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in node.items:
        if isinstance(item, Comment):
            out.extend(comment_lines(item.lines, indent))
            continue
        out.extend(comment_lines(item.above, indent))
        start = len(out)
        value = item.value
        if isinstance(value, Map) and value.entries:
            _map(value, indent + 2, out)
            first = next(i for i in range(start, len(out)) if not out[i].lstrip().startswith("#"))
            out[first] = f"{pad}- {out[first][indent + 2 :]}"
        elif isinstance(value, Seq) and value.items:
            out.append(f"{pad}-")
            _seq(value, indent + 2, out)
        else:
            out.append(f"{pad}- {inline(value)}")
        if item.disabled:
            _disable(out, start, indent)


def _disable(out: list[str], start: int, indent: int) -> None:
    """Comment out the data lines written since *start* (comment lines stay as they are)."""
    for i in range(start, len(out)):
        line = out[i]
        if not line.lstrip().startswith("#"):
            out[i] = f"{line[:indent]}# {line[indent:]}"


def inline(value: Node) -> str:
    if isinstance(value, Flow):
        return "[" + ", ".join(scalar(v, flow=True) for v in value.items) + "]"
    if isinstance(value, Map):
        return "{}"
    if isinstance(value, Seq):
        return "[]"
    return scalar(value, flow=False)


def scalar(value: Scalar, flow: bool) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if _plain_ok(value, flow):
        return value
    return quoted(value)


def _plain_ok(text: str, flow: bool) -> bool:
    """Whether *text* reads back as itself unquoted (not a number, a boolean, a comment, ...)."""
    if not _PLAIN.match(text) or (flow and any(c in text for c in ",[]{}")) or text.startswith(("-", "?", ":")):
        return False
    try:
        loaded = yaml.safe_load(f"[{text}]" if flow else f"k: {text}")
    except yaml.YAMLError:
        return False
    return bool(loaded == ([text] if flow else {"k": text}))


def quoted(text: str) -> str:
    """A double-quoted YAML scalar: backslash escapes for quotes, backslashes and every character
    that is not printable (line and paragraph separators included)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\t":
            out.append("\\t")
        elif ch.isprintable() and ch not in "\u2028\u2029\x85\ufeff":
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def comment_lines(lines: list[str], indent: int) -> list[str]:
    """``# text`` lines at *indent*, wrapped; names from the database cannot break out of them
    (a line break or a control character becomes a space)."""
    pad = " " * indent
    out: list[str] = []
    for line in lines:
        clean = "".join(c if c.isprintable() else " " for c in line).rstrip()
        if not clean:
            out.append(f"{pad}#")
            continue
        lead = len(clean) - len(clean.lstrip())
        wrapped = textwrap.wrap(
            clean.lstrip(),
            width=max(40, WIDTH - indent - 2 - lead),
            break_long_words=False,
            break_on_hyphens=False,
            subsequent_indent="  ",
        )
        out.extend(f"{pad}# {' ' * lead}{part}" for part in wrapped)
    return out
