"""Row keys as they travel outside the database: document ids and stored cursors.

A document id must name exactly one row, whatever the key holds: composite keys whose parts
contain the separator, NULL parts, and values JSON cannot carry (Decimal, bytes, dates). Cursors
and range bounds are stored as JSON in the coordination store and must come back as the same
values, so the database compares them exactly as it compared the originals.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import struct
from collections.abc import Sequence
from typing import Any

import orjson

SEPARATOR = "|"
ESCAPE = "\\"
NULL_PART = "\\N"  # an escaped part can never be exactly this: a lone backslash is always doubled


def _part(value: Any) -> str:
    if value is None:
        return NULL_PART
    if isinstance(value, bytes | bytearray | memoryview):
        text = base64.b64encode(bytes(value)).decode("ascii")
    else:
        text = str(value)
    return text.replace(ESCAPE, ESCAPE + ESCAPE).replace(SEPARATOR, ESCAPE + SEPARATOR)


def document_id(values: Sequence[Any]) -> str:
    """The id of the document built from a row with key *values*.

    One key column: the value as text (``42``, ``abc``), what users expect to look up. Several:
    the parts joined by ``|`` with ``\\`` and ``|`` escaped and NULL written ``\\N``, so that
    ("x|y", "z"), ("x", "y|z"), (None, "") and ("", "") all get different ids.
    """
    if len(values) == 1 and values[0] is not None and not isinstance(values[0], bytes | bytearray | memoryview):
        return str(values[0])
    return SEPARATOR.join(_part(v) for v in values)


def split_document_id(doc_id: str, parts: int) -> list[str | None]:
    """Undo :func:`document_id` into text parts (None for NULL); the inverse for *parts* columns."""
    if parts == 1:
        return [doc_id]
    out: list[str | None] = []
    buf: list[str] = []
    escaped = False
    raw = ""
    for ch in doc_id:
        raw += ch
        if escaped:
            buf.append(ch)
            escaped = False
        elif ch == ESCAPE:
            escaped = True
        elif ch == SEPARATOR:
            out.append(None if raw == NULL_PART + SEPARATOR else "".join(buf))
            buf, raw = [], ""
        else:
            buf.append(ch)
    out.append(None if raw == NULL_PART else "".join(buf))
    if len(out) != parts:
        raise ValueError(f"document id {doc_id!r} does not have {parts} key parts")
    return out


def _escaped(raw: bytes) -> bytes:
    # 0x00 0x01 ends a part; a 0x00 inside it becomes 0x00 0xFF, which sorts after the end mark,
    # so "a" < "a\x00" < "ab" holds on the encoded bytes too
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def _sortable(value: Any) -> bytes:
    if value is None:
        return b"\x01"
    if isinstance(value, bool):
        return b"\x02" + (b"\x01" if value else b"\x00")
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return b"\x03" + struct.pack(">Q", value + 2**63)
    if isinstance(value, int | float | decimal.Decimal):
        bits = struct.unpack(">Q", struct.pack(">d", float(value)))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63
        return b"\x04" + struct.pack(">Q", bits)
    if isinstance(value, bytes | bytearray | memoryview):
        return b"\x06" + _escaped(bytes(value))
    if isinstance(value, dt.date | dt.time):
        return b"\x07" + _escaped(value.isoformat().encode())
    return b"\x05" + _escaped(str(value).encode("utf-8", "surrogatepass"))


def sort_key(values: Sequence[Any]) -> str:
    """The document's sortable key: a text whose byte order is the key's order, part by part.

    Stored in every document (``_key``) so that a target can hand out key ranges: verify and
    repair compare one range at a time, and an index read back is split into slices by it. The
    order is binary (numbers numerically, strings by UTF-8 bytes), not the database's collation:
    ranges of it are the target's own, and a caller maps them to rows with binary comparisons.
    Hex keeps the text a single plain token every backend's range query accepts.
    """
    if len(values) == 1:
        return _sortable(values[0]).hex()
    return b"".join(_sortable(v) for v in values).hex()


_TAG = "$sparkindex"


def _key_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return {_TAG: "decimal", "v": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.timedelta):
        return {_TAG: "timedelta", "v": value.total_seconds()}
    raise TypeError(f"cannot store a key value of type {type(value).__name__}")


def dump_key(key: Sequence[Any] | None) -> str | None:
    """A key as JSON text for the coordination store; Decimal and bytes survive the round trip."""
    if key is None:
        return None
    return orjson.dumps(list(key), default=_key_default).decode()


def _untag(value: Any) -> Any:
    if isinstance(value, dict) and _TAG in value:
        kind, raw = value[_TAG], value["v"]
        if kind == "decimal":
            return decimal.Decimal(raw)
        if kind == "bytes":
            return base64.b64decode(raw)
        if kind == "timedelta":
            return dt.timedelta(seconds=raw)
    return value


def load_key(text: str | None) -> tuple[Any, ...] | None:
    """Read back what :func:`dump_key` wrote; strings stay strings (the source coerces them)."""
    if text is None:
        return None
    return tuple(_untag(v) for v in orjson.loads(text))


__all__ = ["document_id", "dump_key", "load_key", "sort_key", "split_document_id"]
