"""Canonical JSON and the content hash every document carries.

The hash is taken over the canonical (sorted-key) JSON of the document as built from the source,
so verify and change detection compare source and index without fetching whole documents.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
from typing import Any

import orjson


def json_default(value: Any) -> Any:
    """Values documents hold that JSON has no type for (Decimal, bytes, timedelta), as every
    encoding of a document writes them, so that hashes and stored sources agree."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot put a value of type {type(value).__name__} in a document")


def dumps_document(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, default=json_default, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def content_hash(canonical: bytes) -> str:
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()
