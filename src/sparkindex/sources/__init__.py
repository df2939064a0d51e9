"""Relational sources: introspection, partition bounds, keyset pages, related-row fetching."""

from sparkindex.sources.base import Column, ForeignKey, KeyRange, Source, TableInfo
from sparkindex.sources.registry import open_source

__all__ = ["Column", "ForeignKey", "KeyRange", "Source", "TableInfo", "open_source"]
