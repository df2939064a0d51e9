"""MariaDB/MySQL change capture: what :mod:`sparkindex.sources.mysql.changes` needs of the server.

A binlog (``log_bin``) of whole rows with column names (``binlog_format = ROW``,
``binlog_row_image = FULL``, ``binlog_row_metadata = FULL``), one GTID domain to resume from,
the grants a replica has, and binlogs kept long enough that a stopped sync can resume from
them (shorter is a gap: reconciled by a verify and repair, or refused).

The settings are read from ``SHOW GLOBAL VARIABLES`` and judged by the run's own table
(:data:`~sparkindex.sources.mysql.binlog_settings.REQUIRED`); the grants are probed the way the run
probes them (``SHOW BINARY LOGS``, then a binlog dump asked from the end of the newest file),
because ``SHOW GRANTS`` misses roles and wildcards.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sparkindex.config.model import Pipeline
from sparkindex.errors import SparkIndexError, TransientError
from sparkindex.preflight.model import Check, Options, fail, first_line, ok, unreachable, warn
from sparkindex.sources.base import Source
from sparkindex.sources.change_source import WatchedTable
from sparkindex.sources.mysql.binlog_settings import GRANTS, REQUIRED
from sparkindex.sources.mysql.changes import MysqlChangeSource
from sparkindex.sources.mysql.gtids import parse_gtids

SETTINGS = (
    *REQUIRED,
    "gtid_strict_mode",
    "gtid_binlog_pos",
    "expire_logs_days",
    "binlog_expire_logs_seconds",
)
#: how each required setting is made to survive a restart, beside the SET GLOBAL of REQUIRED
PERSIST = "and the same under [mariadbd] in the server's configuration (my.cnf) so that it survives a restart"


def check_mysql_changes(
    pipeline: Pipeline, source: Source, tables: Sequence[WatchedTable], options: Options
) -> list[Check]:
    try:
        with source.engine.connect() as conn:
            version = str(conn.execute(sa.text("SELECT VERSION()")).scalar_one())
            names = ", ".join(f"'{n}'" for n in SETTINGS)
            rows = conn.execute(sa.text(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")).all()
    except sa.exc.DBAPIError as exc:
        again = "make sure the source answers, then check again"
        return [fail("mysql.settings", first_line(exc), again, transient=unreachable(exc))]
    if "MARIADB" not in version.upper():
        return [
            fail(
                "mysql.server",
                f"binlog change capture resumes by MariaDB GTID; {version} is MySQL",
                "use sync.source: polling with indexes[].changes: {column: updated_at}",
            )
        ]
    found = {str(k).lower(): str(v) for k, v in rows}
    checks = [_setting(name, found.get(name)) for name in REQUIRED]
    checks.append(_gtid(found))
    if found.get("log_bin", "").upper() == "ON":
        checks.append(_grants(pipeline, source))
    else:
        checks.append(
            warn("mysql.grants", "not probed: the server keeps no binlog (log_bin is OFF)", _grant_fix(source))
        )
    checks.append(_retention(found, options.min_binlog_retention_s))
    checks.extend(_keys(source, tables))
    return checks


def _setting(name: str, value: str | None) -> Check:
    wanted, how = REQUIRED[name]
    check = f"mysql.{name}"
    if (value or "").upper() == wanted:
        return ok(check, f"{name} = {wanted}")
    if name == "log_bin":
        fix = "start the server with log_bin (log-bin = binlog under [mariadbd] in my.cnf) and restart it"
    else:
        fix = f"{how}, {PERSIST}"
    return fail(check, f"the server has {name} = {value or 'unset'}; binlog change capture needs {wanted}", fix)


def _gtid(found: dict[str, str]) -> Check:
    """Offsets are one domain's GTID sequence numbers: several domains cannot be ordered, and
    without strict mode a sequence number may repeat or go back."""
    name = "mysql.gtid"
    position = found.get("gtid_binlog_pos", "")
    domains = sorted({d for d, _ in parse_gtids(position)})
    if len(domains) > 1:
        return fail(
            name,
            f"the binlog holds several GTID domains ({position}); change capture orders changes within one only",
            "write the source's tables from one GTID domain (gtid_domain_id), or use sync.source: polling",
        )
    if found.get("gtid_strict_mode", "").upper() != "ON":
        return warn(
            name,
            "gtid_strict_mode is OFF: a GTID out of order would go unnoticed, and a sync resumes by GTID",
            f"SET GLOBAL gtid_strict_mode = ON, {PERSIST}",
        )
    return ok(name, f"GTID strict mode, binlog at {position or '(no transaction yet)'}")


def _grant_fix(source: Source) -> str:
    user = sa.make_url(source.url).username or "<user>"
    return f"GRANT {GRANTS} ON *.* TO '{user}'@'<host>'; before MariaDB 10.5, REPLICATION CLIENT for BINLOG MONITOR"


def _grants(pipeline: Pipeline, source: Source) -> Check:
    name = "mysql.grants"
    changes = MysqlChangeSource(pipeline, source, [], "preflight")
    try:
        changes._check_privileges()  # the run's own probe: what it refuses, the run would refuse
    except SparkIndexError as exc:
        text = str(exc)
        if "GRANT" in text:
            return fail(name, text.split(". Binlog change capture")[0], _grant_fix(source))
        if isinstance(exc, TransientError):
            return fail(name, text, "make sure the source answers, then check again", transient=True)
        return fail(name, text, "see the error: the server refused the probe")
    finally:
        changes.close()
    return ok(name, f"the user may read the binlog ({GRANTS})")


def _retention(found: dict[str, str], minimum_s: float) -> Check:
    name = "mysql.binlog_retention"
    seconds = float(found.get("binlog_expire_logs_seconds") or 0) or float(found.get("expire_logs_days") or 0) * 86400
    want = f"{minimum_s / 86400:g} days"
    if seconds == 0:
        return ok(name, "binlogs never expire (purged by hand only)")
    kept = f"binlogs expire after {seconds / 86400:g} days"
    if seconds < minimum_s:
        return warn(
            name,
            f"{kept}, less than the minimum of {want}: a sync stopped longer finds a gap (reconciled by verify)",
            f"SET GLOBAL binlog_expire_logs_seconds = {int(minimum_s)}, {PERSIST}",
        )
    return ok(name, f"{kept} (minimum {want})")


def _keys(source: Source, tables: Sequence[WatchedTable]) -> list[Check]:
    """Row images are matched by key: a watched table without one is refused by the run."""
    keyless = [t.name for t in tables if not (source.table(t.name).primary_key or source.table(t.name).unique_keys)]
    if keyless:
        return [
            fail(f"mysql.keys:{t}", f"table {t!r} has no primary key; its changes cannot be told apart", "add one")
            for t in keyless
        ]
    return []
