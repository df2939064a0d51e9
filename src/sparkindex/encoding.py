"""How document values that JSON has no type for are written.

Every encoding of a document (the canonical bytes the content hash is taken over, the stored
source, Tantivy's JSON) must write a Decimal, bytes or a timedelta the same way, or a hash taken
at the source would never match the one read back from the index. This sits below both
``documents`` (which hashes) and ``targets`` (which write), so neither depends on the other for it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any


def json_default(value: Any) -> Any:
    """orjson's ``default`` hook for the value types documents hold beyond JSON's own."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot put a value of type {type(value).__name__} in a document")
