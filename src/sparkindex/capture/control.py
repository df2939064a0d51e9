"""Commands on a consumer group that are not the sync itself: stop it, drop its slot."""

from __future__ import annotations

import contextlib
import os
import signal
import socket

from sparkindex.capture.consumer_offsets import open_consumer_offsets
from sparkindex.capture.fanout import FanOut
from sparkindex.capture.session import resolve_consumer_plan, watched_tables
from sparkindex.capture.source import open_change_source
from sparkindex.capture.sync_lock import LOCK_TTL_S, STOPS_ON_SIGTERM, source_key, sync_lock_key
from sparkindex.config.model import Pipeline
from sparkindex.coordination.store import CoordinationStore
from sparkindex.resources import open_source, open_store, open_target


def request_sync_stop(store: CoordinationStore, pipeline: Pipeline, group: str | None = None) -> str | None:
    """Stop the running sync of *group* (default: the pipeline's) on the pipeline's source: take
    its lock over (the sync notices within seconds and stops after its current batch) and, on
    this host, send it SIGTERM at once when its process stops cleanly on one (the CLI's; never an
    embedding program, never this process). Returns the holder that was asked to stop, or None
    when no sync of the group runs."""
    key = sync_lock_key(group or pipeline.sync.group, source_key(pipeline))
    lock = store.locks.get(key)
    if lock is None or lock.expires_at <= 0:
        return None
    token = store.locks.acquire(key, f"stop:{os.getpid()}", LOCK_TTL_S, holder_is_dead=lambda _lock: True)
    store.locks.release(key, token)
    host, _, rest = lock.holder.partition(":")
    pid = rest.partition(":")[0]
    signalled = lock.holder.endswith(STOPS_ON_SIGTERM) and pid.isdigit() and int(pid) != os.getpid()
    if host == socket.gethostname() and signalled:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
    return lock.holder


def drop_consumer(pipeline: Pipeline, group: str) -> bool:
    """Remove the group's server-side state (a replication slot) and its offsets: a slot nobody
    reads retains WAL without bound. A later sync of the group starts from that moment."""
    aliases = [i.alias for i in pipeline.indexes]
    with open_source(pipeline) as source:
        fanouts = [FanOut(resolve_consumer_plan(pipeline, source, a), source) for a in aliases]
        with open_change_source(pipeline, source, watched_tables(fanouts), group) as changes:
            changes.prepare()  # a slot named the old way is adopted, so that it is dropped too
            dropped = changes.drop()
    with open_store(pipeline) as store, open_target(pipeline) as target:
        open_consumer_offsets(pipeline, store, lambda: target).forget(group)
    return dropped
