"""A store connection cut under an unpooled engine ends without an ERROR and its traceback.

Found by the chaos campaign (the store restarted while a sync ran). The
unpooled engine (``make_engine(pooled=False)``: connections their user keeps, each close a real
close) rolled back every connection it was about to close; on a connection the network had
dropped, that rollback failed and SQLAlchemy logged it at ERROR with a traceback, although the
caller had already handled the failure.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from sparkindex.coordination.engine import make_engine
from tests.coordination.proxy import TcpProxy

pytestmark = pytest.mark.postgres


def test_closing_a_cut_connection_logs_no_error(services: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    url = services["postgres"]
    port = sa.make_url(url).port or 5432
    proxy = TcpProxy("127.0.0.1", port)
    proxy.start()
    engine = make_engine(url.replace(f":{port}/", f":{proxy.port}/"), pooled=False)
    try:
        with caplog.at_level(logging.DEBUG, logger="sqlalchemy"):
            # as coordination/direct.py keeps one: a raw connection with a transaction open
            raw = engine.raw_connection()
            raw.cursor().execute("SELECT 1")
            proxy.stop()  # the network drops under it
            raw.close()  # its user, having met the failure, gives it up
            with pytest.raises(sa.exc.OperationalError):
                engine.connect().exec_driver_sql("SELECT 1")  # refused: the store is unreachable
    finally:
        proxy.stop()
        engine.dispose()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
