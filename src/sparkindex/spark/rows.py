"""The row protocol between the job reader and the writer.

They run in different Python processes of one Spark task, so everything the writer must know
(which partition and claim a document belongs to, where a page ends, how a partition ended)
travels in the rows themselves.
"""

from __future__ import annotations

from enum import IntEnum

import pyarrow as pa


class Kind(IntEnum):
    DOC = 0  # a built document
    PAGE_END = 1  # everything before this row is one or more whole pages; ``cursor`` is their last key
    PARTITION_END = 2  # the range is exhausted: flush, then complete the partition
    DOC_FAILED = 3  # the document could not be built; ``error`` says why (dead letter)
    RELEASED = 4  # the job is stopping: flush, then hand the partition back (resumable)
    FAILED = 5  # reading failed beyond retries: flush, then fail the partition (retried later)


SCHEMA_DDL = (
    "pid string, token bigint, entity string, kind tinyint, doc_id string, source binary, "
    "hash string, cursor string, error string"
)

ARROW_SCHEMA = pa.schema(
    [
        ("pid", pa.string()),
        ("token", pa.int64()),
        ("entity", pa.string()),
        ("kind", pa.int8()),
        ("doc_id", pa.string()),
        ("source", pa.binary()),
        ("hash", pa.string()),
        ("cursor", pa.string()),
        ("error", pa.string()),
    ]
)

CONTROL_COLUMNS = {"pid", "token", "kind", "cursor"}
