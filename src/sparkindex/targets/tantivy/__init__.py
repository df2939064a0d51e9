"""Embedded Tantivy target: one directory per index version, an alias catalogue beside them."""

from sparkindex.targets.tantivy.client import TantivyTarget
from sparkindex.targets.tantivy.config import TantivyTargetConfig

__all__ = ["TantivyTarget", "TantivyTargetConfig"]
