"""Sources: databases as keys, key ranges, keyset pages and batched fetches, and their change logs.

One interface over SQLAlchemy Core, with a folder per dialect for what differs; no shared code branches on the
dialect. Change sources live with their dialect, so the change model and the ``ChangeSource`` interface live here
too. This package never imports ``documents`` (documents are built on top of sources) nor ``targets`` (an index as a
source is ``sparkindex.index_source``, and ``sparkindex.resources`` chooses between the two).

* ``base``: the ``Source`` interface: introspection (primary and unique keys), keyset pages, batched ``IN``
  fetches, statement timeouts (a timed-out read is transient).
* ``partitioning``: a key space split into ranges in the database's own order (arithmetic for integers, one index
  walk otherwise).
* ``registry``: the database dialect for a URL.
* ``partition_plan``: the partition calculator: key ranges of about ``partition_size`` rows, work units, limits per
  entity and per job, largest work first.
* ``change_model``: ``Change``: which row changed (the old and new values the source knows) and its log position;
  also a TRUNCATE and a range recheck.
* ``change_source``: the ``ChangeSource`` interface every change source implements: offsets as JSON, positions as
  integers, ``continuity`` for gaps.
* ``replica``: ``ReplicaLink``, a read replica and its primary: the bounded wait until the replica has replayed the
  primary's position (``registry.replica_link`` picks the dialect's link).
* ``sqlite/``: ``source``: a file, many reader processes, row values for composite keyset pages.
* ``postgres/``: ``source`` (named cursors, TABLESAMPLE boundaries), ``changes`` (wal2json through the SQL slot
  functions), ``wal2json`` (its rows as changes), ``slots`` (slot names, LSNs as integers), ``replica`` (replay LSNs).
* ``mysql/``: ``source`` (unbuffered cursors, boundaries from one index walk), ``changes`` (the MariaDB binlog by
  GTID, continuity against ``gtid_binlog_state`` and the oldest binlog's GTID list), ``gtids``, ``server_errors``
  (error codes classified once, for preflight and the reader), ``statements`` (``TRUNCATE`` read back from text),
  ``replica`` (``MASTER_GTID_WAIT``).
"""

from sparkindex.sources.base import Column, ForeignKey, KeyRange, Source, TableInfo
from sparkindex.sources.registry import open_database

__all__ = ["Column", "ForeignKey", "KeyRange", "Source", "TableInfo", "open_database"]
