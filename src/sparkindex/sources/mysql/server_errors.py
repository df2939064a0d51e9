"""What a MariaDB server's error codes mean to change capture: come and go, fix the account, or a gap.

Errors are classified where they arise (:mod:`.changes`); the codes and the tests on them live
here so that preflight and the binlog reader agree on them.
"""

from __future__ import annotations

#: Server errors that come and go with the connection or the server's load: too many connections,
#: shutdown in progress, aborted connection and network read/write errors, max_user_connections,
#: lock wait timeout, deadlock, query interrupted, connection killed, max_statement_time,
#: disconnected for inactivity. Client-side errors (2000-2999: cannot connect, server gone away,
#: connection lost) and a closed connection (0) are transient too.
TRANSIENT_CODES = frozenset({1040, 1053, 1152, 1154, 1156, 1158, 1159, 1160, 1161, 1203, 1205, 1213, 1317, 1927, 1969})
#: The account may not do this: access denied to a command, a table or a column, or a routine;
#: a privilege is missing (1227: "you need (at least one of) the ... privilege(s)").
PRIVILEGE_CODES = frozenset({1142, 1143, 1227, 1370})
#: The account cannot log in: wrong user or password, no access to the database, host not allowed.
LOGIN_CODES = frozenset({1044, 1045, 1130, 1698})
ER_HOST_IS_BLOCKED = 1129
ER_ERROR_WHEN_EXECUTING_COMMAND = 1220  # SHOW BINLOG EVENTS on a file purged a moment ago
ER_NO_BINARY_LOGGING = 1381
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236


def error_code(exc: BaseException) -> int | None:
    args = exc.args
    return args[0] if args and isinstance(args[0], int) else None


def error_text(exc: BaseException) -> str:
    args = exc.args
    if len(args) >= 2 and isinstance(args[0], int):
        return f"({args[0]}) {args[1]}"
    return str(exc) or type(exc).__name__


def gtid_gone(exc: BaseException) -> bool:
    """Error 1236 about the requested GTID: purged ("Could not find GTID state requested by slave
    in any binlog files"), not in the binlog ("which is not in the master's binlog"), or missing
    from it under strict mode. Other 1236 answers (binlog not open, a packet over
    max_allowed_packet, a corrupt binlog) are not gaps."""
    if error_code(exc) != ER_MASTER_FATAL_ERROR_READING_BINLOG:
        return False
    text = error_text(exc)
    return "GTID" in text or "purged" in text
