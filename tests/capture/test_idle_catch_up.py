"""A bounded sync with nothing to apply starts no streaming query.

Each query makes Spark start a Python runner process for the change source. A query that stopped
at once, because it found itself caught up, left that runner trying to connect back to a JVM that
had stopped listening: a ``CANNOT_OPEN_SOCKET`` traceback 15 s later in the terminal of every
`make bench` sync line, and about 1.6 s of CPU per run. A listener counts the queries started
(``onQueryStarted`` is called before ``start()`` returns); a sync with one change pending shows it
counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from tests.capture.helpers import Shop, drop_shop, make_shop

pytestmark = pytest.mark.slow


class QueryStarts(StreamingQueryListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def onQueryStarted(self, event: Any) -> None:
        self.names.append(str(event.name))

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


@pytest.fixture
def starts(spark: Any) -> Iterator[QueryStarts]:
    listener = QueryStarts()
    spark.streams.addListener(listener)
    yield listener
    spark.streams.removeListener(listener)


@pytest.fixture(
    params=[pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.mysql)]
)
def shop(request: pytest.FixtureRequest, tmp_path: Path, services: dict[str, str], spark: Any) -> Iterator[Shop]:
    shop = make_shop(request.param, tmp_path / "shop", services)
    shop.reindex(spark)
    shop.sync(spark)  # the consumer's position (and slot) from here on
    yield shop
    drop_shop(request.param, shop, services)


def test_a_caught_up_sync_or_catch_up_starts_no_query_and_a_pending_change_starts_one(
    shop: Shop, spark: Any, starts: QueryStarts
) -> None:
    idle = shop.sync(spark)
    assert (idle.applied, idle.deleted, idle.batches) == (0, 0, 0)
    assert starts.names == [], "nothing was pending, yet a streaming query started"

    shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 3")
    busy = shop.sync(spark)
    assert busy.applied >= 1
    assert len(starts.names) == 1, starts.names

    again = shop.sync(spark)
    assert again.applied == 0 and len(starts.names) == 1, starts.names
    assert again.position >= busy.position

    shop.reindex(spark)  # its catch-up of the new version finds nothing to apply
    assert len(starts.names) == 1, starts.names
    shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 5")
    assert shop.sync(spark).applied >= 1, "the consumer's position survived the reindex"
    assert len(starts.names) == 2, starts.names
    assert shop.verify().clean
