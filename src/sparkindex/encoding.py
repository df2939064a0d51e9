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

import orjson


def json_default(value: Any) -> Any:
    """orjson's ``default`` hook for the value types documents hold beyond JSON's own."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot put a value of type {type(value).__name__} in a document")


def dumps_json(value: Any, option: int = 0) -> bytes:
    """*value* encoded by orjson with :func:`json_default` and *option*, dict keys of any type taken.

    Why two tries: ``OPT_NON_STR_KEYS``, which takes keys that are not exact ``str`` (str
    subclasses such as SQLAlchemy's ``quoted_name``, numbers, dates), makes orjson take a slower
    path for every dict: 2.1 of the 6.7 us a wide benchmark document's canonical encoding took
    (bench/perdoc.py). Documents almost always have plain keys, and for those both
    encodings are the same bytes, so the option is the fallback. A value no encoding takes raises
    the same TypeError from the second try.
    """
    try:
        return orjson.dumps(value, default=json_default, option=option)
    except TypeError:
        return orjson.dumps(value, default=json_default, option=option | orjson.OPT_NON_STR_KEYS)
