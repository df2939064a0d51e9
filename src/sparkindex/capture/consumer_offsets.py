"""Which :class:`~sparkindex.coordination.offsets.ConsumerOffsets` a pipeline's syncs use.

``sync.offsets: store`` (the default): the coordination store, where one transaction records a
batch's positions for every alias at once. ``sync.offsets: target``: an index of the target
(``sync.offsets_index``), for deployments that keep a sync's state beside its data; the target
refuses when it has no indexes to spare (Tantivy), naming the setting.

Switching a pipeline from the store to the target carries the store's offsets over
(:func:`carry_over`): an alias without an offset starts at the head of the log, which would skip
what was committed since the store's position (on sources whose position is ours alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from sparkindex.config.model import Pipeline
from sparkindex.coordination.offsets import ConsumerOffsets
from sparkindex.coordination.store import CoordinationStore
from sparkindex.errors import ConfigError
from sparkindex.targets.base import TargetHandle
from sparkindex.targets.offsets_host import offsets_host

log = logging.getLogger(__name__)


def offsets_namespace(pipeline: Pipeline) -> str:
    """Whose offsets these are, in an offsets index several pipelines may share: the pipeline's
    coordination store and prefix (what kept their offsets apart in the store), hashed (the URL
    may hold a password), unless ``sync.offsets_namespace`` names it."""
    return pipeline.namespace()


def open_consumer_offsets(
    pipeline: Pipeline, store: CoordinationStore, target: Callable[[], TargetHandle]
) -> ConsumerOffsets:
    """*target* is called only for ``sync.offsets: target``."""
    sync = pipeline.sync
    if sync.offsets == "store":
        return store.offsets
    try:
        return offsets_host(target()).consumer_offsets(
            sync.offsets_index, offsets_namespace(pipeline), sync.offsets_retention_days * 86400.0, sync.offsets_cache
        )
    except ConfigError as exc:
        raise ConfigError(f"{pipeline.origin}: {exc}") from None


def carry_over(
    pipeline: Pipeline, store: CoordinationStore, positions: ConsumerOffsets, group: str, aliases: Sequence[str]
) -> int:
    """With ``sync.offsets: target``: copy the store's offsets of *group* for *aliases* the target
    does not hold yet (a pipeline switched from the store); returns how many were copied."""
    if pipeline.sync.offsets != "target":
        return 0
    held = positions.offsets(group)
    stored = store.offsets.offsets(group)
    moved = {a: (o.position, o.offset, o.index) for a, o in stored.items() if a in aliases and a not in held}
    if moved:
        positions.save(group, moved)
        log.warning("consumer group %r: offsets of %s carried over from the store to the target", group, sorted(moved))
    return len(moved)
