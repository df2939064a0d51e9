"""MariaDB change capture notices when the binlog can no longer serve a stored GTID (no silent
gap), and says why a read fails in a way the caller can act on.

Every test here runs on a private MariaDB server (``PrivateMariaDB``, started once for this module),
never on the shared one of ``scripts/test-services.sh``, because the purge test runs ``PURGE BINARY
LOGS``: on the shared server that removes binlogs for every other reader at once. Within one pytest
run the change tests keep no offset from one test to the next (each shop has its own database and
coordination store), so a purge up to a file the test itself created would be safe *there*; but
other people run the suite against the same server at the same time, and a sync of theirs that is
reading an older file would find its GTID purged. A private server costs a few seconds and makes
that impossible. The other tests here only read, create users or look at positions; they share the
private server because it is there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sparkindex.config.urls import normalize_url
from sparkindex.demo.shop import generate_shop
from sparkindex.errors import ConfigError, LogGap, TransientError
from sparkindex.sources.change_source import WatchedTable
from sparkindex.sources.mysql.changes import MysqlChangeSource
from sparkindex.sources.mysql.gtids import gtid_seq
from sparkindex.sources.registry import open_source
from tests.capture.helpers import Shop, write_pipeline
from tests.capture.test_mysql_restarts import PrivateMariaDB
from tests.e2e.shop import copy_shop, fresh_database

pytestmark = [pytest.mark.mysql, pytest.mark.slow]


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateMariaDB]:
    my = PrivateMariaDB()
    yield my
    my.destroy()


@pytest.fixture
def shop(tmp_path: Path, server: PrivateMariaDB) -> Shop:
    directory = tmp_path / "shop"
    directory.mkdir()
    generate_shop(directory / "shop.db", 30)
    url = fresh_database(server.url, f"gap_{uuid.uuid4().hex[:8]}")
    copy_shop(directory / "shop.db", normalize_url(url))
    return Shop(directory, url, write_pipeline(directory, url, "unused"), "unused")


def change_source(shop: Shop, url: str | None = None) -> MysqlChangeSource:
    """The binlog reader of *shop*'s products, connecting as the user of *url* (the shop's own by default)."""
    source = open_source(url or shop.url)
    return MysqlChangeSource(shop.pipeline, source, [WatchedTable("products", [], "test")], "test")


def test_purged_binlogs_are_a_gap_naming_the_gtid_and_a_read_refuses(shop: Shop, server: PrivateMariaDB) -> None:
    """The stored GTID's binlog purged: continuity names the GTID and where the log starts now, a
    current offset is still served, and a read from the stored offset raises LogGap (before the
    fix it was a TransientError, retried for ever: the sync never ended and never said why)."""
    changes = change_source(shop)
    try:
        if server.binlogs()[0] == "binlog.000001":  # nothing purged on this server yet
            assert changes.continuity({"gtid": "", "seq": 0}) is None
        shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 1")
        stored = changes.head()
        assert stored["seq"] > 0 and changes.continuity(stored) is None
        shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 2")  # committed after the stored GTID
        missed = changes.head()
        server.admin("FLUSH BINARY LOGS")
        shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 3")
        newest = server.binlogs()[-1]
        assert changes.continuity(stored) is None, "nothing purged yet"
        server.purge_binlogs_to(newest)
        assert server.binlogs() == [newest], "the purge must have removed the stored GTID's file"

        gap = changes.continuity(stored)
        assert gap is not None
        assert stored["gtid"] in gap.reason and "purged" in gap.reason
        assert (gap.stored, gap.available) == (stored["seq"], missed["seq"])
        assert changes.continuity(missed) is None, "the newest file starts right after this GTID"
        assert changes.continuity(changes.head()) is None
        # an offset from before any transaction: everything purged since is missing too
        empty = changes.continuity({"gtid": "", "seq": 0})
        assert empty is not None and empty.available == missed["seq"]

        with pytest.raises(LogGap) as raised:
            changes.read(stored, 100)
        assert not isinstance(raised.value, TransientError)
        assert stored["gtid"] in str(raised.value)
        assert (raised.value.stored, raised.value.available) == (stored["seq"], missed["seq"])
        # the log still serves the newest file: a read from its start goes on as before
        batch = changes.read(missed, 100)
        assert [(c.table, c.op, (c.new or {}).get("id")) for c in batch.changes] == [("products", "update", 3)]
    finally:
        changes.close()


def test_a_binlog_behind_the_stored_gtid_or_of_another_history_is_a_gap(shop: Shop) -> None:
    """A stored GTID the server's binlog never wrote: past its end (a server restored from a
    backup, RESET MASTER, another server), of a domain it does not have, or of an originating
    server that never wrote to its domain. Each is a gap naming the GTID, not a quiet database."""
    changes = change_source(shop)
    try:
        earlier = changes.head()
        shop.sql("UPDATE products SET stock = stock + 1 WHERE id = 4")
        head = changes.head()
        domain, server_id, seq = head["gtid"].split("-")
        ahead = f"{domain}-{server_id}-{int(seq) + 1000}"
        foreign_domain = f"{int(domain) + 7}-{server_id}-{seq}"
        foreign_server = f"{domain}-{int(server_id) + 4242}-{seq}"
        for gtid, words in [(ahead, "before"), (foreign_domain, "domain"), (foreign_server, "server")]:
            gap = changes.continuity({"gtid": gtid, "seq": gtid_seq(gtid)})
            assert gap is not None, gtid
            assert gtid in gap.reason and words in gap.reason, gap.reason
            assert gap.stored == gtid_seq(gtid)
        # this server's GTIDs are served, an earlier one as well as the head
        assert changes.continuity(earlier) is None and changes.continuity(head) is None
    finally:
        changes.close()


@pytest.fixture
def user(shop: Shop, server: PrivateMariaDB) -> Iterator[tuple[str, str]]:
    """A user with SELECT on the shop only, and the shop's URL as that user (at 'localhost': the
    server sees 127.0.0.1 as localhost, where its anonymous account would otherwise match first)."""
    name = f"u{uuid.uuid4().hex[:8]}"
    database = sa.make_url(shop.url).database
    server.admin(
        f"CREATE USER '{name}'@'localhost' IDENTIFIED BY 'pw'",
        f"GRANT SELECT ON `{database}`.* TO '{name}'@'localhost'",
    )
    url = sa.make_url(shop.url).set(username=name, password="pw").render_as_string(hide_password=False)
    yield name, url
    server.admin(f"DROP USER IF EXISTS '{name}'@'localhost'")


def test_missing_replication_privileges_are_a_config_error_naming_the_grant(
    shop: Shop, server: PrivateMariaDB, user: tuple[str, str]
) -> None:
    """Privileges do not come back by waiting: every step refuses with a ConfigError that names the
    grant to give (before the fix: check passed and a read failed with a TransientError, retried
    for ever)."""
    name, url = user
    changes = change_source(shop, url)
    try:
        head = changes.head()  # @@gtid_binlog_pos needs no privilege
        for attempt in (
            changes.check,
            lambda: changes.continuity(head),
            lambda: changes.read({"gtid": "", "seq": 0}, 10),
        ):
            with pytest.raises(ConfigError) as raised:
                attempt()
            message = str(raised.value)
            assert "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.*" in message and name in message, message
        # with BINLOG MONITOR alone, what is still missing is REPLICATION SLAVE, found by check already
        server.admin(f"GRANT BINLOG MONITOR ON *.* TO '{name}'@'localhost'")
        assert changes.continuity(head) is None
        with pytest.raises(ConfigError, match="REPLICATION SLAVE"):
            changes.check()
        server.admin(f"GRANT REPLICATION SLAVE ON *.* TO '{name}'@'localhost'")
        changes.check()
    finally:
        changes.close()


def test_an_unreachable_server_stays_transient(shop: Shop) -> None:
    """Only connection-level failures are retried: a server that does not answer may come back."""
    closed = sa.make_url(shop.url).set(port=1).render_as_string(hide_password=False)
    changes = change_source(shop, closed)
    try:
        with pytest.raises(TransientError):
            changes.head()
        with pytest.raises(TransientError):
            changes.continuity({"gtid": "0-1-1", "seq": 1})
    finally:
        changes.close()
