"""A live sync gives up only on a stream that keeps failing without progress: five failures in a
row that acknowledged nothing, and no sooner than the window after the first of them."""

from __future__ import annotations

from sparkindex.capture.restarts import StreamRestarts


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _restarts(clock: Clock) -> StreamRestarts:
    return StreamRestarts(0.5, 30.0, max_failures=5, window_s=300.0, clock=clock)


def test_failures_without_progress_give_up_after_the_count_and_the_window() -> None:
    clock = Clock()
    r = _restarts(clock)
    pauses = []
    for _ in range(4):
        pause = r.failed(progressed=False)
        assert pause is not None
        pauses.append(pause)
        clock.now += 20
    assert all(0 <= p <= 30.0 for p in pauses)
    # the fifth in a row, 80 s after the first: too soon to give up (a loaded machine's minute)
    assert r.failed(progressed=False) is not None
    clock.now += 219
    assert r.failed(progressed=False) is not None  # 299 s after the first
    clock.now += 1
    assert r.failed(progressed=False) is None  # 300 s and more than five in a row
    assert r.failures == 7


def test_a_query_that_acknowledged_a_batch_starts_the_count_afresh() -> None:
    clock = Clock()
    r = _restarts(clock)
    for _ in range(20):  # a long-lived sync: a blip every ten minutes, each after some progress
        assert r.failed(progressed=True) is not None
        assert r.failures == 1
        clock.now += 600


def test_failures_in_a_row_within_the_window_of_each_other_give_up() -> None:
    clock = Clock()
    r = _restarts(clock)
    for _ in range(4):
        assert r.failed(progressed=False) is not None
        clock.now += 100
    assert r.failed(progressed=False) is None  # five in a row over 400 s, 100 s apart


def test_a_quiet_stream_failing_rarely_never_gives_up() -> None:
    """Nothing to acknowledge between failures (a table nobody writes), but a month apart: each
    query ran longer than the window, so each failure starts the count afresh."""
    clock = Clock()
    r = _restarts(clock)
    for _ in range(20):
        assert r.failed(progressed=False) is not None
        assert r.failures == 1
        clock.now += 301


def test_the_backoff_grows_without_progress_and_resets_with_it() -> None:
    clock = Clock()
    r = StreamRestarts(1.0, 30.0, max_failures=100, window_s=0, clock=clock, jitter=0.0)
    assert [r.failed(progressed=False) for _ in range(3)] == [1.0, 2.0, 4.0]
    assert r.failed(progressed=True) == 1.0
    assert r.failed(progressed=False) == 2.0
