"""The fence log: every attempt to move an alias with a fencing token, and how it ended.

Only the current lock holder moves an alias. The lock table keeps one row per alias
whose token grows at every acquisition and never shrinks (a released lock keeps its row), and the
target refuses a swap carrying a token older than one it has seen. This log lets a check after
the fact (the chaos campaign's) prove that held: finalize's swap (the one catch-up's hand-over is
given for every alias it swaps) writes a row *before* the move is tried, outcome ``pending``, and
updates it after:

* ``moved``: the target pointed the alias at the index;
* ``refused``: the store's lock check or the target's fence or compare-and-swap said no
  (:class:`~sparkindex.errors.LockLost`);
* ``error``: anything else (the alias may or may not have moved: the answer never came);
* ``pending`` stays when the process ended between the two writes.

Each row also keeps the lock table's token and holder for the alias as they were when the row was
written: tokens only grow, so that is the highest fence issued for the alias before the attempt.
:func:`stale_moves` reports every ``moved`` attempt whose fence is lower than that, or lower than
the fence of an earlier attempt on the same alias (any outcome: a fence that was carried had been
issued). "Earlier" is the store's order of the rows (their id), not the clocks of the processes
that wrote them. What the log cannot show: a lock taken over between the row and the move; that
window is the target's fence check's to close (the new holder records its token in the target
before it reads the alias).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from sparkindex.coordination.base import rerun_on_conflict
from sparkindex.errors import LockLost

log = logging.getLogger(__name__)

PENDING = "pending"
MOVED = "moved"
REFUSED = "refused"
ERROR = "error"
OUTCOMES = (PENDING, MOVED, REFUSED, ERROR)


@dataclass(frozen=True)
class SwapAttempt:
    id: int  # the store's order of the attempts
    alias: str
    index: str  # what the alias was to point at
    expected_previous: str | None  # what it had to point at for the compare-and-swap
    fence: int | None  # the token the attempt carried
    job_id: str | None
    attempted_at: float  # the recording process's clock
    outcome: str  # pending | moved | refused | error
    detail: str | None  # why it was refused, or the error
    #: the lock table's token and holder for the alias when the attempt was recorded (None: no
    #: lock row named the alias)
    lock_token: int | None = None
    lock_holder: str | None = None
    finished_at: float | None = None


class SwapLog:
    def __init__(self, engine: Engine, table: sa.Table, lock: sa.Table) -> None:
        self.engine = engine
        self.t = table
        self.lt = lock

    def begin(
        self, alias: str, index: str, expected_previous: str | None, fence: int | None, job_id: str | None
    ) -> int:
        """Record an attempt about to be made (outcome ``pending``); returns its id."""
        return self._begin(uuid.uuid4().hex, alias, index, expected_previous, fence, job_id)

    @rerun_on_conflict
    def _begin(
        self, key: str, alias: str, index: str, expected_previous: str | None, fence: int | None, job_id: str | None
    ) -> int:
        t, lt = self.t, self.lt
        with self.engine.begin() as conn:
            # a rerun after a lost reply finds the row it wrote
            done = conn.execute(sa.select(t.c.id).where(t.c.attempt_key == key)).scalar()
            if done is not None:
                return int(done)
            lock = conn.execute(sa.select(lt.c.token, lt.c.holder).where(lt.c.lock_key == alias)).first()
            res = conn.execute(
                t.insert().values(
                    attempt_key=key,
                    alias=alias,
                    index_name=index,
                    expected_previous=expected_previous,
                    fence=fence,
                    job_id=job_id,
                    lock_token=None if lock is None else lock.token,
                    lock_holder=None if lock is None else lock.holder,
                    attempted_at=time.time(),
                    outcome=PENDING,
                )
            )
            key_row = res.inserted_primary_key
            assert key_row is not None
            return int(key_row[0])

    @rerun_on_conflict
    def finish(self, attempt_id: int, outcome: str, detail: str | None = None) -> None:
        if outcome not in OUTCOMES or outcome == PENDING:
            raise ValueError(f"not an outcome of a finished swap attempt: {outcome!r}")
        with self.engine.begin() as conn:
            conn.execute(
                self.t.update()
                .where(self.t.c.id == attempt_id)
                .values(outcome=outcome, detail=None if detail is None else detail[:4000], finished_at=time.time())
            )

    @contextlib.contextmanager
    def attempt(
        self, alias: str, index: str, expected_previous: str | None, fence: int | None, job_id: str | None
    ) -> Iterator[int]:
        """Record the attempt, run the block (which moves the alias), record how it ended:
        ``moved`` when the block returns, ``refused`` on :class:`LockLost`, ``error`` on any
        other exception (re-raised either way)."""
        attempt_id = self.begin(alias, index, expected_previous, fence, job_id)
        try:
            yield attempt_id
        except LockLost as exc:
            self._finish_quietly(attempt_id, REFUSED, str(exc))
            raise
        except BaseException as exc:
            self._finish_quietly(attempt_id, ERROR, f"{type(exc).__name__}: {exc}")
            raise
        self.finish(attempt_id, MOVED)

    def _finish_quietly(self, attempt_id: int, outcome: str, detail: str) -> None:
        """A store that fails now must not hide why the swap failed: the row stays ``pending``."""
        try:
            self.finish(attempt_id, outcome, detail)
        except SQLAlchemyError as exc:
            log.warning("swap attempt %s stays pending in the fence log (it ended %s): %s", attempt_id, outcome, exc)

    @rerun_on_conflict
    def attempts(self, alias: str | None = None) -> list[SwapAttempt]:
        """Every attempt (on *alias*, or on every alias), in the order the store recorded them."""
        t = self.t
        stmt = sa.select(t).order_by(t.c.id)
        if alias is not None:
            stmt = stmt.where(t.c.alias == alias)
        with self.engine.connect() as conn:
            return [
                SwapAttempt(
                    id=int(r.id),
                    alias=r.alias,
                    index=r.index_name,
                    expected_previous=r.expected_previous,
                    fence=None if r.fence is None else int(r.fence),
                    job_id=r.job_id,
                    attempted_at=r.attempted_at,
                    outcome=r.outcome,
                    detail=r.detail,
                    lock_token=None if r.lock_token is None else int(r.lock_token),
                    lock_holder=r.lock_holder,
                    finished_at=r.finished_at,
                )
                for r in conn.execute(stmt)
            ]


def stale_moves(attempts: Sequence[SwapAttempt]) -> list[str]:
    """One line for every ``moved`` attempt whose fence was stale when it was recorded: lower than
    the lock table's token for its alias then, or than the fence of an earlier attempt on the
    same alias; and for every move without a fence (nothing shows it fresh). Pure: judges the
    attempts given (``store.swap_log.attempts()``), in id order."""
    found: list[str] = []
    newest: dict[str, SwapAttempt] = {}  # alias -> the earlier attempt with the highest fence
    for a in sorted(attempts, key=lambda x: x.id):
        earlier = newest.get(a.alias)
        if a.outcome == MOVED:
            what = f"attempt {a.id}: alias {a.alias!r} moved to {a.index} (job {a.job_id})"
            if a.fence is None:
                found.append(f"{what} without a fence")
            elif (
                a.lock_token is not None
                and a.fence < a.lock_token
                and (earlier is None or earlier.fence is None or a.lock_token >= earlier.fence)
            ):
                found.append(
                    f"{what} with fence {a.fence}, but the lock table had issued fence {a.lock_token} "
                    f"(to {a.lock_holder}) before it"
                )
            elif earlier is not None and earlier.fence is not None and a.fence < earlier.fence:
                found.append(
                    f"{what} with fence {a.fence}, but attempt {earlier.id} (job {earlier.job_id}, "
                    f"{earlier.outcome}) had carried fence {earlier.fence} before it"
                )
        if a.fence is not None and (earlier is None or earlier.fence is None or a.fence > earlier.fence):
            newest[a.alias] = a
    return found


__all__ = ["ERROR", "MOVED", "OUTCOMES", "PENDING", "REFUSED", "SwapAttempt", "SwapLog", "stale_moves"]
