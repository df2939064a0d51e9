"""What MariaDB/MySQL change capture needs of the server, as constants: read by the change
source that relies on them and by ``check``, which must not need the binlog reader's extra to
say so."""

from __future__ import annotations

#: server variable -> (the value the binlog reader needs, how to set it)
REQUIRED = {
    "log_bin": ("ON", "start the server with log_bin"),
    "binlog_format": ("ROW", "SET GLOBAL binlog_format = ROW"),
    "binlog_row_image": ("FULL", "SET GLOBAL binlog_row_image = FULL"),
    "binlog_row_metadata": ("FULL", "SET GLOBAL binlog_row_metadata = FULL"),
}
#: the privileges the binlog reader's user needs
GRANTS = "REPLICATION SLAVE, BINLOG MONITOR"
