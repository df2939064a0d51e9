#!/usr/bin/env bash
# Installs (apt) and starts Debian's PgBouncer in front of the suite's PostgreSQL, in TRANSACTION
# pooling: a client's server connection is handed back after every transaction, so no session state
# (SET, session advisory locks, protocol-level prepared statements) survives from one transaction to
# the next. The coordination store must work behind it (tests/coordination runs through it).
#   127.0.0.1:$PGB_PORT (default 56432), every database of the PostgreSQL on $PG_PORT, user sparkindex.
# Sized for the cluster-scale claims benchmark: thousands of clients, a small server pool.
# Idempotent: a PgBouncer already answering on its port is reused. Called by test-services.sh.
set -euo pipefail
SERVICES_DIR=${SERVICES_DIR:-/tmp/sparkindex-services}
PG_PORT=${PG_PORT:-55432}
PGB_PORT=${PGB_PORT:-56432}
PGB_POOL=${PGB_POOL:-40}
PG_BIN=/usr/lib/postgresql/15/bin

if ! command -v pgbouncer >/dev/null 2>&1; then
  echo "installing pgbouncer"
  apt-get update -qq
  # the package's own service (port 6432) is not used: policy-rc.d keeps it from starting
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
fi

DIR="$SERVICES_DIR/pgbouncer"
if ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PGB_PORT" -d sparkindex -U sparkindex; then
  mkdir -p "$DIR"
  cat > "$DIR/pgbouncer.ini" <<CONF
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = sparkindex
pool_mode = transaction
max_client_conn = 5000
default_pool_size = $PGB_POOL
max_db_connections = $PGB_POOL
reserve_pool_size = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
log_connections = 0
log_disconnections = 0
CONF
  echo '"sparkindex" ""' > "$DIR/userlist.txt"
  chown -R postgres:postgres "$DIR"
  # PgBouncer refuses to run as root; each client is a file descriptor, so the limit is raised first
  su postgres -s /bin/bash -c "ulimit -n 20000 2>/dev/null || ulimit -n 8192; pgbouncer -d '$DIR/pgbouncer.ini'"
  for _ in $(seq 1 60); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PGB_PORT" -d sparkindex -U sparkindex && break
    sleep 0.25
  done
fi
echo "pgbouncer: postgresql+psycopg://sparkindex@127.0.0.1:$PGB_PORT/sparkindex (transaction pooling)"
