"""Locks, one per alias: TTL, heartbeat refresh, atomic transfer and a growing fencing token.

The token grows at every acquisition. Whoever holds the lock passes its token to the target's
alias swap, which refuses tokens older than the last one it saw; a driver that was paused past
its TTL and lost the lock therefore cannot move the alias.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from sparkindex.coordination.base import rerun_on_conflict, store_now
from sparkindex.coordination.records import LockRecord
from sparkindex.errors import LockHeld, LockLost


class LockManager:
    def __init__(self, engine: Engine, table: sa.Table) -> None:
        self.engine = engine
        self.t = table

    @rerun_on_conflict
    def get(self, key: str) -> LockRecord | None:
        with self.engine.connect() as conn:
            return self._read(conn, [key]).get(key)

    def _read(self, conn: sa.Connection, keys: Sequence[str]) -> dict[str, LockRecord]:
        rows = conn.execute(sa.select(self.t).where(self.t.c.lock_key.in_(list(keys))))
        return {
            r.lock_key: LockRecord(
                r.lock_key, r.job_id, r.holder, r.token, r.acquired_at, r.last_heartbeat, r.expires_at
            )
            for r in rows
        }

    @rerun_on_conflict  # a lock wait that timed out (a holder paused inside its transaction) reruns
    def acquire(
        self,
        key: str,
        holder: str,
        ttl_s: float,
        job_id: str | None = None,
        holder_is_dead: Callable[[LockRecord], bool] = lambda _lock: False,
    ) -> int:
        """Take the lock; return the new fencing token. Raises :class:`LockHeld` if a live holder has it.

        An expired lock, or one whose holder *holder_is_dead* confirms gone, is taken over. Safe to
        rerun whole: each attempt reads the lock again, and a rerun after a lost COMMIT reply finds
        the lock its own and takes it again with the next token.
        """
        for _ in range(3):
            with self.engine.connect() as conn:  # not get(): its own reruns would stack on these
                current = self._read(conn, [key]).get(key)
            try:
                with self.engine.begin() as conn:
                    now = store_now(conn)  # expiry on the store's clock, whatever this process's says
                    if current is None:
                        conn.execute(
                            self.t.insert().values(
                                lock_key=key,
                                job_id=job_id,
                                holder=holder,
                                token=1,
                                acquired_at=now,
                                last_heartbeat=now,
                                expires_at=now + ttl_s,
                            )
                        )
                        return 1
                    if current.holder != holder and current.expires_at > now and not holder_is_dead(current):
                        raise LockHeld(
                            f"alias {key!r} is locked by {current.holder} (job {current.job_id}) until "
                            f"{time.strftime('%H:%M:%S', time.localtime(current.expires_at))}; "
                            "wait, or stop that job with `sparkindex stop`"
                        )
                    res = conn.execute(
                        self.t.update()
                        .where(self.t.c.lock_key == key, self.t.c.token == current.token)
                        .values(
                            job_id=job_id,
                            holder=holder,
                            token=current.token + 1,
                            acquired_at=now,
                            last_heartbeat=now,
                            expires_at=now + ttl_s,
                        )
                    )
                    if res.rowcount == 1:
                        # the UPDATE may have waited long for the row (a holder paused inside its
                        # transaction): the lease starts now, not when this attempt began
                        self._renew(conn, key, current.token + 1, ttl_s, new=True)
                        return current.token + 1
            except IntegrityError:
                continue  # someone inserted first; read again
        raise LockHeld(f"alias {key!r}: lock contended, try again")

    def _renew(self, conn: sa.Connection, key: str, token: int, ttl_s: float, *, new: bool = False) -> bool:
        """Start *token*'s lease again from the store's clock now; *new*: the lease of a fresh
        acquisition. False if *token* no longer holds the lock."""
        now = store_now(conn)
        times = {"last_heartbeat": now, "expires_at": now + ttl_s, **({"acquired_at": now} if new else {})}
        res = conn.execute(self.t.update().where(self.t.c.lock_key == key, self.t.c.token == token).values(**times))
        return bool(res.rowcount == 1)

    def refresh(self, key: str, token: int, ttl_s: float) -> None:
        with self.engine.begin() as conn:
            renewed = self._renew(conn, key, token, ttl_s)
        if not renewed:
            raise LockLost(f"lock {key!r}: token {token} no longer holds it")

    @rerun_on_conflict
    def unexpired(self, keys: Sequence[str]) -> list[LockRecord]:
        """The locks among *keys* whose lease has not run out, on the store's clock (one read)."""
        with self.engine.connect() as conn:
            found, now = self._read(conn, keys), store_now(conn)
        return [lock for lock in found.values() if lock.expires_at > now]

    @rerun_on_conflict
    def check(self, key: str, token: int) -> None:
        held = {lock.key: lock for lock in self.unexpired([key])}.get(key)
        if held is None or held.token != token:
            raise LockLost(f"lock {key!r}: token {token} no longer holds it")

    @rerun_on_conflict
    def transfer(self, key: str, token: int, from_job: str | None, to_job: str) -> None:
        """Hand the lock to another job atomically (one ``UPDATE ... WHERE job_id = old``)."""
        with self.engine.begin() as conn:
            res = conn.execute(
                self.t.update()
                .where(
                    self.t.c.lock_key == key,
                    self.t.c.token == token,
                    self.t.c.job_id.is_(None) if from_job is None else self.t.c.job_id == from_job,
                )
                .values(job_id=to_job, last_heartbeat=store_now(conn))
            )
        if res.rowcount != 1:
            raise LockLost(f"lock {key!r}: transfer from job {from_job} refused")

    @rerun_on_conflict
    def release(self, key: str, token: int) -> bool:
        """Release if still ours. The row stays (with an expired TTL) so the token keeps growing."""
        with self.engine.begin() as conn:
            res = conn.execute(
                self.t.update()
                .where(self.t.c.lock_key == key, self.t.c.token == token)
                .values(expires_at=0.0, job_id=None)
            )
        return bool(res.rowcount == 1)
