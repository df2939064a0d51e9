"""Which sync may run: one per consumer group and source database, under a lock in the store.

Its key carries the source database (hashed) as well as the group, so two pipelines that share
a coordination store but read different databases never wait on each other (nor share a slot,
whose name carries the database too: :func:`sparkindex.sources.postgres.slots.slot_name`).
"""

from __future__ import annotations

import hashlib

from sparkindex.config.model import Pipeline

LOCK_TTL_S = 30.0
LOCK_REFRESH_S = 2.0

#: ends the holder name of a sync whose process stops cleanly on SIGTERM (the CLI's): only such a
#: process is signalled by ``sparkindex stop``. A sync embedded in another program (a scheduler's
#: worker, a notebook) installs no handler, so SIGTERM would kill its host; it is stopped by the
#: lock's takeover alone, within one refresh (:data:`LOCK_REFRESH_S`).
STOPS_ON_SIGTERM = ":sigterm"


def sync_lock_key(group: str, source: str = "") -> str:
    """One sync per consumer group and source database: two pipelines that share a coordination
    store but read different databases never wait on each other (nor share a slot)."""
    return f"sync:{group}@{source}" if source else f"sync:{group}"


def source_key(pipeline: Pipeline) -> str:
    """The source database, hashed, for the sync's lock."""
    import sqlalchemy as sa

    url = sa.make_url(pipeline.source_url())
    # the database's name, not the host: one server reached by two names (a VIP and an address)
    # must still be one lock, since its slot's name carries the database name only
    where = f"{url.get_backend_name()}/{url.database or ''}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]
