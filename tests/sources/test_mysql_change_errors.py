"""How MariaDB change capture classifies driver errors (no server needed): only what comes and
goes with the connection is retried; a missing grant, a refused login or a binlog switched off
is a ConfigError saying what to change; a GTID the binlog cannot serve is never "transient"."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pymysql
import pytest

from sparkindex.errors import ConfigError, LogGap, PermanentError, TransientError
from sparkindex.sources.mysql.changes import MysqlChangeSource
from sparkindex.sources.mysql.gtids import parse_gtids
from sparkindex.sources.mysql.server_errors import gtid_gone

PURGED = "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged."  # noqa: E501


def change_source() -> MysqlChangeSource:
    source = SimpleNamespace(url="mysql://app:secret@db.example:3306/shop")
    pipeline = SimpleNamespace(sync=SimpleNamespace(server_id=7301))
    return MysqlChangeSource(cast(Any, pipeline), cast(Any, source), [], "test")


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), TransientError, "Can't connect"),
        (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), TransientError, "Lost"),
        (pymysql.err.InterfaceError(0, ""), TransientError, "(0)"),
        (ConnectionResetError(104, "Connection reset by peer"), TransientError, "reset"),
        (pymysql.err.OperationalError(1040, "Too many connections"), TransientError, "Too many"),
        (pymysql.err.OperationalError(1927, "Connection was killed"), TransientError, "killed"),
        (pymysql.err.OperationalError(1053, "Server shutdown in progress"), TransientError, "shutdown"),
        (
            pymysql.err.OperationalError(
                1227, "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation"
            ),
            ConfigError,
            "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'app'@",
        ),
        (
            pymysql.err.OperationalError(1045, "Access denied for user 'app'@'10.0.0.5' (using password: YES)"),
            ConfigError,
            "user and password",
        ),
        (pymysql.err.OperationalError(1381, "You are not using binary logging"), ConfigError, "log_bin"),
        (pymysql.err.OperationalError(1236, "Binary log is not open"), ConfigError, "log_bin"),
        (
            pymysql.err.OperationalError(
                1236, "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master"
            ),
            ConfigError,
            "max_allowed_packet",
        ),
        (pymysql.err.OperationalError(1129, "Host '10.0.0.5' is blocked"), PermanentError, "flush-hosts"),
        (
            pymysql.err.OperationalError(1236, "binlog truncated in the middle of event; consider out of disk space"),
            PermanentError,
            "truncated",
        ),
        (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), PermanentError, "syntax"),
    ],
)
def test_errors_are_classified_by_whether_waiting_can_help(
    exc: BaseException, kind: type[Exception], words: str
) -> None:
    error = change_source()._error(exc, "reading the binlog")
    assert type(error) is kind, error
    assert words in str(error) and "reading the binlog" in str(error)
    assert "secret" not in str(error)


def test_only_1236_about_the_gtid_is_a_gap() -> None:
    assert gtid_gone(pymysql.err.OperationalError(1236, PURGED))
    assert gtid_gone(
        pymysql.err.OperationalError(
            1236, "Error: connecting slave requested to start from GTID 0-1-9, which is not in the master's binlog"
        )
    )
    assert not gtid_gone(pymysql.err.OperationalError(1236, "Binary log is not open"))
    assert not gtid_gone(pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"))
    assert issubclass(LogGap, PermanentError) and not issubclass(LogGap, TransientError)


def test_gtid_lists_parse_per_domain_and_server() -> None:
    assert parse_gtids("0-1-812,0-2-900") == {(0, 1): 812, (0, 2): 900}
    assert parse_gtids("[0-1-3]") == {(0, 1): 3}
    assert parse_gtids("[]") == {} and parse_gtids("") == {} and parse_gtids(None) == {}
