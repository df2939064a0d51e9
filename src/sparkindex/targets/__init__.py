"""Search backends: versioned physical indexes behind an alias, bulk with per-item results.

A backend is a writer (:mod:`.writer`), a reader (:mod:`.reader`) and, optionally, a keeper of
consumer offsets (:mod:`.offsets_host`); :mod:`.base` has the values they speak. Callers type
against the narrowest capability they use.

* ``base``: version names, the bulk item and its result, stored documents, ``TargetHandle``.
* ``writer``: versions, bulk, stages, the fenced swap, prune, count (``TargetWriter``, ``Stage``).
* ``reader``: hash scans, keyset reads, key splits, mapping, search (``TargetReader``).
* ``offsets_host``: consumer offsets kept in the target (``sync.offsets: target``).
* ``target``: ``Target``, writer and reader in one, what ``open_target`` returns.
* ``registry``: URL schemes to backends, opened lazily.
* ``field_types``: the mapping field types every target knows.
* ``write_deadline``: a bulk's requests capped at the partition lease's end.
* ``tantivy/``, ``search_engine/`` (OpenSearch and Elasticsearch share it), ``opensearch/``,
  ``elasticsearch/``: one folder per backend, with its config, client and errors.
"""

from sparkindex.targets.base import BulkItem, BulkItemResult, SearchHit, TargetHandle, version_name
from sparkindex.targets.offsets_host import OffsetsHost
from sparkindex.targets.reader import TargetReader
from sparkindex.targets.registry import open_target
from sparkindex.targets.target import Target
from sparkindex.targets.writer import Stage, TargetWriter

__all__ = [
    "BulkItem",
    "BulkItemResult",
    "OffsetsHost",
    "SearchHit",
    "Stage",
    "Target",
    "TargetHandle",
    "TargetReader",
    "TargetWriter",
    "open_target",
    "version_name",
]
