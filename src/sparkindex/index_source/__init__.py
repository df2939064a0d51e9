"""An index of any target as a source: read back into Spark (``spark.read.format("sparkindex")``)
and rebuilt into new versions with a new mapping (a pipeline whose ``source.url`` names a search
backend).

It is a :class:`~sparkindex.sources.base.Source` that reads through a target's
:class:`~sparkindex.targets.reader.TargetReader`, so it lives in a package of its own beside
``sources`` and ``targets``, which know nothing of each other. ``sparkindex.resources`` opens it
for a URL of a target scheme.

* ``source``: ``IndexSource``: its tables are indexes and aliases, ranges and cursors are sort keys.
* ``columns``: its documents as Arrow columns typed by its mapping.
"""

from sparkindex.index_source.source import IndexSource

__all__ = ["IndexSource"]
