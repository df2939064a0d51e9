"""Search backends: versioned physical indexes behind an alias, bulk with per-item results.

A backend is a writer (:mod:`.writer`), a reader (:mod:`.reader`) and, optionally, a keeper of
consumer offsets (:mod:`.offsets_host`); :mod:`.base` has the values they speak.
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
