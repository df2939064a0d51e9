"""Search backends: versioned physical indexes behind an alias, bulk with per-item results."""

from sparkindex.targets.base import BulkItem, BulkItemResult, SearchHit, Target, version_name
from sparkindex.targets.registry import open_target

__all__ = ["BulkItem", "BulkItemResult", "SearchHit", "Target", "open_target", "version_name"]
