"""Opening what a pipeline names - its coordination store, its source, its target - in one place.

Each opener returns a context manager that closes what it opened at the end of the block::

    with open_store(pipeline) as store, open_source(pipeline) as source, open_target(pipeline) as target:
        ...

An object a long-lived runner keeps (a server's target, a sync's store) is closed by that
runner's own ``close``. The openers live here, not on :class:`~sparkindex.config.model.Pipeline`,
because the pipeline model sits in the lowest layer and imports nothing above it; and the choice
between a database source and an index source lives here because ``sources`` and ``targets`` know
nothing of each other.

* ``opening``: ``open_store``, ``open_source``, ``open_target`` for a pipeline, and
  ``open_store_url``, ``open_source_url``, ``open_target_url`` for a caller with a URL only;
  ``open_source(pipeline, bulk_reads=True)`` is the read replica (``source.read_url``) when there
  is one, and ``wait_for_read_source`` waits until it has replayed the primary's position.
"""

from sparkindex.resources.opening import (
    open_source,
    open_source_url,
    open_store,
    open_store_url,
    open_target,
    open_target_url,
    wait_for_read_source,
)

__all__ = [
    "open_source",
    "open_source_url",
    "open_store",
    "open_store_url",
    "open_target",
    "open_target_url",
    "wait_for_read_source",
]
