#!/usr/bin/env bash
# Installs (apt) and starts the database servers the test suite needs, each as a private
# instance on its own port under $SERVICES_DIR, configured for change capture:
#   PostgreSQL 15 on 127.0.0.1:55432 (wal_level=logical, wal2json), user/db "sparkindex", trust auth;
#   MariaDB      on 127.0.0.1:53306 (log_bin, binlog_format=ROW, binlog_row_image=FULL,
#                binlog_row_metadata=FULL, GTID strict mode: what binlog change capture needs), root without
#                password, db "sparkindex".
# Idempotent: a server already answering on its port is reused. Stops nothing it did not start.
# Also installs Debian's chromium: the web page's test drives it headless (tests/server/test_page.py);
# and Debian's prometheus for promtool, which lints /metrics (tests/server/test_metrics_promtool.py).
# Then PgBouncer (scripts/test-pgbouncer.sh) and the read replicas (scripts/test-replicas.sh).
set -euo pipefail
SERVICES_DIR=${SERVICES_DIR:-/tmp/sparkindex-services}
PG_PORT=${PG_PORT:-55432}
MY_PORT=${MY_PORT:-53306}
PG_BIN=/usr/lib/postgresql/15/bin

mkdir -p "$SERVICES_DIR"
chmod 755 "$SERVICES_DIR"
# One run at a time: each pytest worker runs this script when its session starts (tests/conftest.py
# `services`), and two runs must never start the same server, clone the same replica or install
# the same package at once. flock holds the lock itself and closes it (-o) before it runs this
# script again under it, so the servers started here never inherit it (a daemon holding the lock
# would make every later run wait forever).
if [ -z "${SPARKINDEX_SERVICES_LOCKED:-}" ]; then
  exec env SPARKINDEX_SERVICES_LOCKED=1 flock -o "$SERVICES_DIR/.services.lock" bash "$0" "$@"
fi

need=()
[ -x "$PG_BIN/postgres" ] || need+=(postgresql-15)
[ -e /usr/lib/postgresql/15/lib/wal2json.so ] || need+=(postgresql-15-wal2json)
command -v mariadbd >/dev/null 2>&1 || need+=(mariadb-server)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/promtool ] || need+=(prometheus)  # promtool: /metrics is linted (tests/server/test_metrics_promtool.py)
# libfaketime: chaos/clock.py jumps a process's clock; installed here, not by a test worker mid-run
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(faketime)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- PostgreSQL -------------------------------------------------------------------------------
PGDATA="$SERVICES_DIR/pg"
if ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    rm -rf "$PGDATA"; mkdir -p "$PGDATA"; chown postgres:postgres "$PGDATA"
    su postgres -c "$PG_BIN/initdb -D '$PGDATA' -U sparkindex --auth=trust -E UTF8 >/dev/null"
    cat >> "$PGDATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PGDATA'
wal_level = logical
max_replication_slots = 40
max_wal_senders = 20
max_connections = 400
fsync = off
synchronous_commit = off
CONF
  fi
  su postgres -c "$PG_BIN/pg_ctl -D '$PGDATA' -l '$PGDATA/server.log' -w -t 60 start >/dev/null"
  # a data directory made with smaller limits: raised once, here, as the script just started the
  # server (never from a test worker's run of this script, which finds the server answering)
  slots=$("$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U sparkindex -d postgres -tAc "SHOW max_replication_slots")
  if [ "$slots" -lt 40 ]; then
    "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U sparkindex -d postgres \
      -c "ALTER SYSTEM SET max_replication_slots = 40" -c "ALTER SYSTEM SET max_wal_senders = 20" \
      -c "ALTER SYSTEM SET max_connections = 400"
    su postgres -c "$PG_BIN/pg_ctl -D '$PGDATA' -l '$PGDATA/server.log' -w -t 60 restart -m fast >/dev/null"
  fi
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U sparkindex sparkindex 2>/dev/null || true
fi
echo "postgres: postgresql+psycopg://sparkindex@127.0.0.1:$PG_PORT/sparkindex"

# --- MariaDB ----------------------------------------------------------------------------------
MYDATA="$SERVICES_DIR/mysql"
MYTMP="$SERVICES_DIR/mysql-tmp"
if ! mariadb-admin -h 127.0.0.1 -P "$MY_PORT" -u root --silent ping >/dev/null 2>&1; then
  # A temporary directory of its own: a starting mariadbd deletes every #sql* file in its tmpdir,
  # so servers sharing /tmp delete one another's temporary tables (chaos/servers.py says more).
  mkdir -p "$MYTMP"; chown mysql:mysql "$MYTMP"
  if [ ! -d "$MYDATA/mysql" ]; then
    rm -rf "$MYDATA"; mkdir -p "$MYDATA"; chown mysql:mysql "$MYDATA"
    mariadb-install-db --user=mysql --datadir="$MYDATA" --tmpdir="$MYTMP" \
      --auth-root-authentication-method=normal --skip-test-db >/dev/null
  fi
  mariadbd --user=mysql --datadir="$MYDATA" --tmpdir="$MYTMP" --port="$MY_PORT" --bind-address=127.0.0.1 \
    --socket="$MYDATA/mysqld.sock" --pid-file="$MYDATA/mysqld.pid" --log-error="$MYDATA/error.log" \
    --log-bin="$MYDATA/binlog" --binlog-format=ROW --server-id=1 --max-connections=300 \
    --binlog-row-image=FULL --binlog-row-metadata=FULL --gtid-strict-mode=ON \
    --innodb-flush-log-at-trx-commit=2 --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
    >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    mariadb-admin -h 127.0.0.1 -P "$MY_PORT" -u root --silent ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  mariadb -h 127.0.0.1 -P "$MY_PORT" -u root -e "CREATE DATABASE IF NOT EXISTS sparkindex"
fi
echo "mysql: mysql://root@127.0.0.1:$MY_PORT/sparkindex"

# --- PgBouncer (transaction pooling) in front of the PostgreSQL above, and the read replicas ------
bash "$(dirname "$0")/test-pgbouncer.sh"
if [ -f "$(dirname "$0")/test-replicas.sh" ]; then bash "$(dirname "$0")/test-replicas.sh"; fi
