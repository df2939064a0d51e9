"""A whole backend: the writer and the reader of its indexes in one object.

:func:`~sparkindex.targets.registry.open_target` returns one, and every backend is one (Tantivy,
and OpenSearch and Elasticsearch, which are also an
:class:`~sparkindex.targets.offsets_host.OffsetsHost`). Code that only writes types against
:class:`~sparkindex.targets.writer.TargetWriter`, code that only reads against
:class:`~sparkindex.targets.reader.TargetReader`; only code that does both needs this.
"""

from __future__ import annotations

from sparkindex.targets.reader import TargetReader
from sparkindex.targets.writer import TargetWriter


class Target(TargetWriter, TargetReader):
    """A search backend that writes versions and reads them back. It adds nothing of its own."""
