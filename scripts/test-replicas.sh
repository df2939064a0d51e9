#!/usr/bin/env bash
# Read replicas of the suite's servers (scripts/test-services.sh starts the primaries, then this):
#   PostgreSQL 15 streaming replica of 127.0.0.1:55432 on 127.0.0.1:55433 (pg_basebackup -R,
#     hot_standby, hot_standby_feedback: a long partition read is not cancelled by a recovery
#     conflict), data in $SERVICES_DIR/pg-replica;
#   MariaDB replica of 127.0.0.1:53306 on 127.0.0.1:53307 (server-id 2, GTID replication from
#     the primary's position when it was set up), applying only databases named si_replica*
#     (the replica tests' own: the shared primary also serves tests that write huge rows), data in
#     $SERVICES_DIR/mysql-replica.
# Idempotent and safe to re-run while tests use the replicas: a replica that answers and follows
# its primary is left alone, a paused one too (a test pauses replay on purpose). What is repaired:
# a replica of another primary (the primary's data directory was made again) or one that lost its
# primary's WAL is made again from a fresh base backup; MariaDB replication stopped by an error
# (the primary's binlog purged or reset under it) starts again from the primary's current GTID
# position. Stops nothing it did not start.
set -euo pipefail
SERVICES_DIR=${SERVICES_DIR:-/tmp/sparkindex-services}
PG_PORT=${PG_PORT:-55432}
PG_REPLICA_PORT=${PG_REPLICA_PORT:-55433}
MY_PORT=${MY_PORT:-53306}
MY_REPLICA_PORT=${MY_REPLICA_PORT:-53307}
PG_BIN=/usr/lib/postgresql/15/bin

# --- PostgreSQL streaming replica ------------------------------------------------------------
PGDATA="$SERVICES_DIR/pg"
REPLICA="$SERVICES_DIR/pg-replica"
pg_replica_sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_REPLICA_PORT" -U sparkindex -d postgres -tAc "$1"; }
system_id() { "$PG_BIN/pg_controldata" "$1" 2>/dev/null | sed -n 's/^Database system identifier: *//p'; }

make_pg_replica() {
  if [ -s "$REPLICA/postmaster.pid" ]; then
    su postgres -c "$PG_BIN/pg_ctl -D '$REPLICA' -w -t 60 stop -m immediate >/dev/null" || true
  fi
  rm -rf "$REPLICA"; mkdir -p "$REPLICA"; chown postgres:postgres "$REPLICA"; chmod 700 "$REPLICA"
  su postgres -c "$PG_BIN/pg_basebackup -h 127.0.0.1 -p $PG_PORT -U sparkindex -D '$REPLICA' -R -X stream -c fast"
  # the primary's settings came with the copy; these lines come later, so they win
  cat >> "$REPLICA/postgresql.conf" <<CONF
# scripts/test-replicas.sh: the streaming replica
port = $PG_REPLICA_PORT
unix_socket_directories = '$REPLICA'
hot_standby = on
hot_standby_feedback = on
CONF
}

start_pg_replica() {
  su postgres -c "$PG_BIN/pg_ctl -D '$REPLICA' -l '$REPLICA/server.log' -w -t 60 start >/dev/null"
}

pg_streaming() {  # the replica receives WAL from its primary (within a few seconds of starting)
  for _ in $(seq 1 100); do
    [ "$(pg_replica_sql "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'" 2>/dev/null)" = 1 ] && return 0
    sleep 0.1
  done
  return 1
}

pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_REPLICA_PORT"; }
if ! pg_ready && [ -f "$REPLICA/PG_VERSION" ] && su postgres -c "$PG_BIN/pg_ctl -D '$REPLICA' status" >/dev/null 2>&1; then
  # it runs and is still starting (another run of this script started it): wait, never start it twice
  for _ in $(seq 1 600); do pg_ready && break; sleep 0.1; done
fi
if ! pg_ready; then
  if [ ! -f "$REPLICA/standby.signal" ] || [ "$(system_id "$REPLICA")" != "$(system_id "$PGDATA")" ]; then
    make_pg_replica
  fi
  start_pg_replica
  if ! pg_streaming; then  # its primary's WAL is gone (it was down too long): a new copy
    echo "the PostgreSQL replica does not stream from its primary: making it again" >&2
    make_pg_replica
    start_pg_replica
    pg_streaming || { echo "the PostgreSQL replica does not stream; see $REPLICA/server.log" >&2; exit 1; }
  fi
fi
echo "postgres replica: postgresql+psycopg://sparkindex@127.0.0.1:$PG_REPLICA_PORT/sparkindex"

# --- MariaDB replica -------------------------------------------------------------------------
MYDATA="$SERVICES_DIR/mysql-replica"
MYTMP="$SERVICES_DIR/mysql-replica-tmp"  # its own: a starting mariadbd empties its tmpdir
primary() { mariadb -h 127.0.0.1 -P "$MY_PORT" -u root -N -B -e "$1"; }
replica() { mariadb -h 127.0.0.1 -P "$MY_REPLICA_PORT" -u root -N -B -e "$1"; }
slave_field() {  # one field of SHOW SLAVE STATUS (empty when replication is not set up)
  mariadb -h 127.0.0.1 -P "$MY_REPLICA_PORT" -u root -e "SHOW SLAVE STATUS\G" | sed -n "s/^ *$1: //p"
}

follow_primary() {  # replication from the primary's current GTID position, what came before skipped
  local pos
  pos=$(primary "SELECT @@gtid_binlog_pos")
  replica "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL gtid_slave_pos = '$pos';
    CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $MY_PORT, MASTER_USER = 'root',
      MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1;
    START SLAVE"
}

if ! mariadb-admin -h 127.0.0.1 -P "$MY_REPLICA_PORT" -u root --silent ping >/dev/null 2>&1; then
  mkdir -p "$MYTMP"; chown mysql:mysql "$MYTMP"
  if [ ! -d "$MYDATA/mysql" ]; then
    rm -rf "$MYDATA"; mkdir -p "$MYDATA"; chown mysql:mysql "$MYDATA"
    mariadb-install-db --user=mysql --datadir="$MYDATA" --tmpdir="$MYTMP" \
      --auth-root-authentication-method=normal --skip-test-db >/dev/null
  fi
  mariadbd --user=mysql --datadir="$MYDATA" --tmpdir="$MYTMP" --port="$MY_REPLICA_PORT" --bind-address=127.0.0.1 \
    --socket="$MYDATA/mysqld.sock" --pid-file="$MYDATA/mysqld.pid" --log-error="$MYDATA/error.log" \
    --server-id=2 --skip-log-bin --max-connections=200 --read-only=ON \
    --replicate-wild-do-table='si_replica%.%' --slave-net-timeout=10 --userstat=ON \
    --innodb-flush-log-at-trx-commit=2 --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
    >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    mariadb-admin -h 127.0.0.1 -P "$MY_REPLICA_PORT" -u root --silent ping >/dev/null 2>&1 && break
    sleep 0.5
  done
fi
if [ -z "$(slave_field Master_Host)" ]; then
  follow_primary  # a new replica
elif { [ "$(slave_field Slave_IO_Running)" = No ] && [ "$(slave_field Last_IO_Errno)" != 0 ]; } ||
  { [ "$(slave_field Slave_SQL_Running)" = No ] && [ "$(slave_field Last_SQL_Errno)" != 0 ]; }; then
  # only a thread that stopped on its error: an IO thread still retrying (the primary restarting)
  # keeps its position, and gtid_slave_pos of a running SQL thread is never reset
  # its position is gone from the primary's binlog (purged, RESET MASTER) or an event failed:
  # the replica tests' databases are made afresh per test, so the history before now is not needed
  echo "the MariaDB replica stopped on an error: following the primary from its current position" >&2
  follow_primary
fi
replica "SET GLOBAL userstat = ON"  # rows read per table: the tests see their reads land here
# A thread stopped without an error is left alone: a replica test pauses the SQL thread on purpose.
echo "mysql replica: mysql://root@127.0.0.1:$MY_REPLICA_PORT/sparkindex"
