# shellcheck shell=bash
# PostgreSQL for the fleet queue's tests (sourced by scripts/test, which defines apt_install and on_exit).
#
# Starts two private PostgreSQL clusters (trust authentication, loopback only, a free port each, data in a
# temporary directory): one every test shares, each test in a schema of its own, and one that the restart
# test stops and starts mid-run, so that restart never refuses the connections of the tests running beside it.
# Exports:
#   AGENTD_TEST_POSTGRES_URL       postgres://postgres@127.0.0.1:PORT/postgres (the shared cluster)
#   AGENTD_TEST_PG_RESTART_URL     the same for the restartable cluster
#   AGENTD_TEST_PG_CTL             a command prefix for the restartable one; the test appends `stop -m fast` /
#                                  `start`
# When a private cluster cannot be made (no PostgreSQL binaries and no root to install them), the machine's
# own server on 127.0.0.1:5432 is used if it answers (started with pg_ctlcluster if it is down), without
# AGENTD_TEST_PG_CTL: the restart test then says it skips (a failure under CI).

postgres_bin_dir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1
}

if [ -z "$(postgres_bin_dir)" ]; then
  apt_install postgresql postgresql-client || true
fi
PG_BIN="$(postgres_bin_dir)"

# Makes and starts one private cluster; sets PG_URL and PG_CTL to its URL and pg_ctl command prefix.
postgres_private_cluster() {
  [ -n "$PG_BIN" ] || return 1
  local runas=()
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || return 1
    runas=(runuser -u postgres --)
  fi
  PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/agentd-pg.XXXXXX")"
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$PG_DIR"; fi
  local port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "${runas[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres -E UTF8 >"$PG_DIR/initdb.log" 2>&1 || {
    cat "$PG_DIR/initdb.log" >&2
    rm -rf "$PG_DIR"
    return 1
  }
  cat >>"$PG_DIR/data/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_DIR'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  PG_CTL="${runas[*]} $PG_BIN/pg_ctl -D $PG_DIR/data -w -t 60 -l $PG_DIR/server.log"
  $PG_CTL start >/dev/null || {
    cat "$PG_DIR/server.log" >&2
    rm -rf "$PG_DIR"
    return 1
  }
  # Hooks run in the order they were added: stop the server, then remove its files.
  on_exit "$PG_CTL stop -m immediate >/dev/null 2>&1"
  on_exit "rm -rf '$PG_DIR'"
  PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

postgres_machine_server() {
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    local cluster
    cluster="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)"
    [ -n "$cluster" ] && pg_ctlcluster --skip-systemctl-redirect "$cluster" main start 2>/dev/null || true
    sleep 1
  fi
  pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || return 1
  export AGENTD_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
}

if postgres_private_cluster; then
  export AGENTD_TEST_POSTGRES_URL="$PG_URL"
  if postgres_private_cluster; then
    export AGENTD_TEST_PG_RESTART_URL="$PG_URL" AGENTD_TEST_PG_CTL="$PG_CTL"
  else
    setup_failed "postgres: the restart test's private cluster could not be started"
  fi
  echo "postgres: private clusters at $AGENTD_TEST_POSTGRES_URL and $AGENTD_TEST_PG_RESTART_URL (restartable)" >&2
elif postgres_machine_server; then
  echo "postgres: the machine's server at $AGENTD_TEST_POSTGRES_URL (the restart test will skip)" >&2
else
  setup_failed "postgres: no PostgreSQL could be started (a private cluster or the machine's server on 5432)"
fi
