"""Shapes a target or an index cannot hold are refused at plan time, with the key that says so
(exit 2 from the CLI): no index is created and no Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex import api
from tests.shaping.test_filter_errors import ROOT, pipeline


def _reviews_as_join(config: Path) -> None:
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("name: reviews\n        type: nested", "name: review\n        type: join"))


@pytest.mark.parametrize(
    ("key", "value", "join", "message"),
    [
        ("routing", "category_id", False, r"indexes\[0\]\.routing: target .* has no shards to route"),
        ("deletes", "soft", True, r"indexes\[0\]\.deletes: soft deletes .* supports deletes: hard only"),
        ("routing", "category_id", True, r"indexes\[0\]\.routing: an index with join relations routes each child"),
        ("exclude", "[no_such]", False, r"indexes\[0\]\.exclude\[0\]: 'no_such' is no column of table 'products'"),
        ("transform", "{function: 'json:dumps', on_change: [nope]}", False, r"transform\.on_change\[0\]: 'nope'"),
    ],
    ids=["routing-on-tantivy", "soft-with-joins", "routing-with-joins", "unknown-exclude", "unknown-on-change"],
)
def test_a_shape_the_index_cannot_hold_is_refused_by_its_key(
    tmp_path: Path, key: str, value: str, join: bool, message: str
) -> None:
    config = pipeline(tmp_path, ROOT, key, value)
    if join:
        _reviews_as_join(config)
    with pytest.raises(api.ConfigError, match=message):
        api.explain(config)
    assert not (tmp_path / "index").exists()


def test_a_field_named_like_a_needed_key_is_refused(tmp_path: Path) -> None:
    """A computed field named ``id`` would hide the id column the documents are keyed by."""
    config = pipeline(tmp_path, ROOT, "computed", "{id: 'stock + 1'}")
    with pytest.raises(api.ConfigError, match=r"the field 'id' is named like column 'id' of table 'products'"):
        api.explain(config)
