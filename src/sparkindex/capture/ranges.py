"""Sort-key ranges of the indexes a sync writes: how whole-index work is spread over Spark tasks.

Two kinds of change concern every document of an index rather than some rows: a polling key
diff (deletes the source does not log) and a TRUNCATE (rows gone without saying which). Either
becomes one change per sort-key range of each index (about ``range_docs`` documents each), and
the stream gives every such change a Spark task of its own (:mod:`sparkindex.capture.stream`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from sparkindex.config.indexes import IndexConfig
from sparkindex.config.model import Pipeline
from sparkindex.sources.change_model import Change

log = logging.getLogger(__name__)


def index_ranges(
    pipeline: Pipeline, range_docs: Callable[[IndexConfig], int]
) -> Iterator[tuple[IndexConfig, str | None, str | None]]:
    """(index config, lo, hi) of every sort-key range of every alias; an alias that points at no
    index yet (a first reindex's catch-up writes a version the alias does not name) gets one
    range, unbounded: the apply step covers whatever index it writes to."""
    from sparkindex.resources import open_target

    with open_target(pipeline) as target:
        for idx in pipeline.indexes:
            index = target.alias_target(idx.alias)
            if index is None:
                yield idx, None, None
                continue
            parts = max(1, -(-target.count(index) // range_docs(idx)))
            notes: list[str] = []
            for lo, hi in target.key_ranges(index, parts, notes):
                yield idx, lo, hi
            for note in notes:
                log.info("ranges of %s: %s", idx.alias, note)


def spread_truncates(pipeline: Pipeline, changes: Sequence[Change]) -> list[Change]:
    """*changes* with each TRUNCATE replaced by one per alias and sort-key range of about
    ``sync.truncate_range_docs`` documents (its position and table kept): the rebuild of every
    document then runs on as many Spark tasks."""
    truncates = [c for c in changes if c.op == "truncate" and not c.old]
    if not truncates:
        return list(changes)
    per_range = pipeline.sync.truncate_range_docs
    ranges = list(index_ranges(pipeline, lambda _idx: per_range))
    for c in truncates:
        log.warning("table %r truncated: rebuilding every document by key, in %d ranges", c.table, len(ranges))
    spread = [
        Change(c.table, "truncate", c.position, old={"alias": idx.alias, "lo": lo, "hi": hi}, ts=c.ts)
        for c in truncates
        for idx, lo, hi in ranges
    ]
    return [*(c for c in changes if not (c.op == "truncate" and not c.old)), *spread]
