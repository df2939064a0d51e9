"""Documents read back as Arrow columns typed by the mapping: conversions and their refusals."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from sparkindex.errors import ConfigError
from sparkindex.index_source.columns import DocumentColumns, ValueMismatch
from sparkindex.targets.base import StoredDocument

MAPPING: dict[str, Any] = {
    "properties": {
        "title": {"type": "text", "copy_to": ["everything"]},
        "code": {"type": "keyword"},
        "n": {"type": "long"},
        "ratio": {"type": "double"},
        "ok": {"type": "boolean"},
        "at": {"type": "date"},
        "owner": {"type": "object", "properties": {"name": {"type": "keyword", "copy_to": ["who"]}}},
        "parts": {"type": "nested", "properties": {"w": {"type": "long"}}},
        "blob": {"type": "object"},
        "everything": {"type": "text"},
        "who": {"type": "text"},
    }
}


def doc(doc_id: str, **source: Any) -> StoredDocument:
    return StoredDocument(doc_id, "05", None, source)


def test_schema_follows_the_mapping_without_copy_to_only_fields() -> None:
    cols = DocumentColumns.of(MAPPING, None, "test")
    assert cols.fields == ["title", "code", "n", "ratio", "ok", "at", "owner", "parts", "blob"]
    assert cols.schema == pa.schema(
        [
            pa.field("_id", pa.string(), nullable=False),
            ("title", pa.string()),
            ("code", pa.string()),
            ("n", pa.int64()),
            ("ratio", pa.float64()),
            ("ok", pa.bool_()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("owner", pa.struct([("name", pa.string())])),
            ("parts", pa.list_(pa.struct([("w", pa.int64())]))),
            ("blob", pa.string()),
        ]
    )


def test_values_convert_to_their_columns() -> None:
    cols = DocumentColumns.of(MAPPING, None, "test")
    docs = [
        doc(
            "a|b",
            title="Mixed Case, punctuation!",
            code=12,  # a number in a keyword field: its JSON text
            n=3.0,
            ratio=2,
            ok=False,
            at="2025-03-04T05:06:07",
            owner={"name": "ü", "extra": 1},
            parts={"w": 1},  # a lone object in a nested field: a list of one
            blob={"any": ["shape", None]},
        ),
        doc("\\N", at="2025-03-04T05:06:07+02:00", parts=[{"w": None}, None, {}]),
        doc("z", at="2025-01-01", owner=None),
        doc("ms", at=1_700_000_000_123),
    ]
    rows = cols.batch(docs).to_pylist()
    assert rows[0] == {
        "_id": "a|b",
        "title": "Mixed Case, punctuation!",
        "code": "12",
        "n": 3,
        "ratio": 2.0,
        "ok": False,
        "at": dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC),
        "owner": {"name": "ü"},
        "parts": [{"w": 1}],
        "blob": '{"any":["shape",null]}',
    }
    assert rows[1]["at"] == dt.datetime(2025, 3, 4, 3, 6, 7, tzinfo=dt.UTC)
    assert rows[1]["parts"] == [{"w": None}, None, {"w": None}]
    assert rows[1]["title"] is None and rows[1]["owner"] is None
    assert rows[2]["at"] == dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    assert rows[3]["at"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"n": "12"}, "document 'bad|1': field 'n' holds str '12'; the mapping says an integer"),
        ({"n": True}, "field 'n' holds bool True"),
        ({"n": 1.5}, "field 'n' holds float 1.5"),
        ({"ratio": "x"}, "field 'ratio' holds str 'x'; the mapping says a number"),
        ({"ok": 1}, "field 'ok' holds int 1; the mapping says a boolean"),
        ({"at": "yesterday"}, "field 'at' holds str 'yesterday'; the mapping says a date"),
        ({"owner": "alice"}, "field 'owner' holds str 'alice'; the mapping says an object"),
        ({"parts": [{"w": "x"}]}, r"field 'parts\[0\].w' holds str 'x'"),
    ],
)
def test_values_that_do_not_fit_name_document_and_field(source: dict[str, Any], message: str) -> None:
    cols = DocumentColumns.of(MAPPING, None, "test")
    with pytest.raises(ValueMismatch, match=message):
        cols.batch([doc("fine"), doc("bad|1", **source)])


def test_chosen_fields_and_their_errors() -> None:
    cols = DocumentColumns.of(MAPPING, ["n", "title", "n"], "reader")
    assert cols.fields == ["n", "title"]
    assert cols.batch([doc("1", n=1, title="t", code="c")]).to_pylist() == [{"_id": "1", "n": 1, "title": "t"}]
    with pytest.raises(ConfigError, match=r"reader: no field 'everything', 'nope' in the index \(fields: \['title'"):
        DocumentColumns.of(MAPPING, ["everything", "nope"], "reader")
    with pytest.raises(ConfigError, match="the document id takes"):
        DocumentColumns.of({"properties": {"_id": {"type": "keyword"}}}, None, "reader")
