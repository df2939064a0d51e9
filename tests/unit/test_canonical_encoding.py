"""The canonical encoding takes orjson's fast path for plain keys and its slow one for any other.

``dumps_document`` used to pass ``OPT_NON_STR_KEYS`` on every call; now it is the fallback
(sparkindex.encoding.dumps_json). Content hashes stored in indexes were taken over the old
bytes, so both must agree on every document, and the keys only the slow path takes (a str
subclass such as SQLAlchemy's ``quoted_name``, numbers, dates) must still encode as before.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import orjson
import pytest
from sqlalchemy.sql.elements import quoted_name

from sparkindex.documents.hashing import dumps_document
from sparkindex.encoding import json_default


def before(doc: Any) -> bytes:
    """The encoding as it was: one call, every key type taken."""
    return orjson.dumps(doc, default=json_default, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


HOSTILE: dict[str, Any] = {
    "Zeta": 'Grüße 東京 🚀 "q" \\ \n\t\x00\x1f',
    "alpha": [1, -0.0, 0.0, 1e-7, 1.5e300, 2**63 - 1, True, None],
    "Alpha": {"b": decimal.Decimal("1.10"), "a": b"\x00\xffbytes", "c": dt.timedelta(seconds=90.5)},
    "when": [dt.date(2024, 1, 5), dt.datetime(2024, 1, 5, 10, 0, 0, 123), dt.time(1, 2, 3)],
    "uuid": uuid.UUID(int=7),
    "": {"nested": [{"y": 1, "x": {"ä": 2, "a": 3}}]},
}


def test_plain_keys_encode_to_the_same_bytes_as_before() -> None:
    assert dumps_document(HOSTILE) == before(HOSTILE)


@pytest.mark.parametrize(
    "key",
    [quoted_name("Name", None), 7, 2.5, True, dt.date(2024, 1, 5), uuid.UUID(int=1)],
    ids=["quoted_name", "int", "float", "bool", "date", "uuid"],
)
def test_keys_only_the_slow_path_takes_encode_as_before(key: Any) -> None:
    doc = {"plain": 1, "nested": [{key: "value", "b": 2}], key: {"z": None}}
    assert dumps_document(doc) == before(doc)


def test_a_value_no_encoding_takes_still_raises_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable: object"):
        dumps_document({"a": object()})
    with pytest.raises(TypeError):
        dumps_document({"a": 2**64})  # beyond 64 bits: orjson refuses it on both paths
