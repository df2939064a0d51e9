"""A backend is a writer, a reader and, optionally, a keeper of consumer offsets: each capability
stays narrow, and each backend is what it declares (no server needed)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sparkindex.errors import ConfigError
from sparkindex.targets.base import TargetHandle
from sparkindex.targets.elasticsearch import ElasticsearchTarget
from sparkindex.targets.offsets_host import OffsetsHost, offsets_host
from sparkindex.targets.opensearch import OpenSearchTarget
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.registry import open_target, target_class
from sparkindex.targets.tantivy import TantivyTarget
from sparkindex.targets.target import Target
from sparkindex.targets.writer import TargetWriter


def own_methods(cls: type) -> set[str]:
    """The public methods *cls* declares itself (not those it inherits)."""
    return {name for name, value in vars(cls).items() if inspect.isfunction(value) and not name.startswith("_")}


def test_each_capability_declares_only_its_own_methods() -> None:
    assert own_methods(TargetHandle) == {"alias_target", "count", "close"}
    assert own_methods(TargetWriter) == {
        "create_version",
        "version_exists",
        "list_versions",
        "delete_version",
        "finish_version",
        "bulk",
        "bulk_unsynced",
        "sync",
        "open_stage",
        "adopt_stages",
        "unmanaged_index",
        "swap",
        "observe_fence",
        "prune_versions",
    }
    assert own_methods(TargetReader) == {
        "scan_hashes",
        "search",
        "read_documents",
        "mapping",
        "key_splits",
        "key_ranges",
        "documents_by_id",
        "routings",
        "count_hash_prefix",
        "stores_checks",
        "range_checksums",
        "key_checks",
    }
    assert own_methods(OffsetsHost) == {"consumer_offsets"}
    assert own_methods(Target) == set(), "a whole backend is its capabilities, nothing more"


def test_a_reader_cannot_write_and_a_writer_cannot_read() -> None:
    assert not hasattr(TargetReader, "bulk") and not hasattr(TargetReader, "swap")
    assert not hasattr(TargetWriter, "scan_hashes") and not hasattr(TargetWriter, "read_documents")
    assert not hasattr(Target, "consumer_offsets"), "offsets are a capability of their own"


@pytest.mark.parametrize(
    ("url", "cls", "keeps_offsets"),
    [
        ("tantivy://index", TantivyTarget, False),
        ("opensearch://localhost:9200", OpenSearchTarget, True),
        ("elasticsearch://localhost:9200", ElasticsearchTarget, True),
    ],
)
def test_every_backend_is_a_whole_target_and_only_search_engines_keep_offsets(
    url: str, cls: type[Target], keeps_offsets: bool
) -> None:
    assert target_class(url) is cls
    assert issubclass(cls, TargetWriter) and issubclass(cls, TargetReader)
    assert issubclass(cls, OffsetsHost) is keeps_offsets


def test_a_target_without_offsets_is_refused_naming_the_setting(tmp_path: Path) -> None:
    target = open_target("tantivy://index", tmp_path, {})
    with pytest.raises(ConfigError, match=r"sync\.offsets: target: TantivyTarget cannot keep consumer offsets"):
        offsets_host(target)
