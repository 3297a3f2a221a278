# shellcheck shell=bash
# An S3-compatible store for the S3 artifact store's tests (sourced by scripts/test, which defines say,
# apt_install and on_exit).
#
# Starts moto_server (installed with pip into a cached virtualenv when it is not on PATH) on 127.0.0.1 and a
# free port, waits until it answers, and exports:
#   AGENTD_TEST_S3_ENDPOINT    http://127.0.0.1:PORT
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
#                              dummy credentials (moto accepts any) for the tests and the daemons they start
#   AWS_EC2_METADATA_DISABLED  true: no instance-metadata lookups from the SDK on a machine that is not EC2
# The server is stopped on exit. Each test makes its own bucket. When moto cannot be installed or started, the
# run stops under CI (`setup_failed`); elsewhere the S3 tests skip.

s3_moto_server() {
  if command -v moto_server >/dev/null 2>&1; then
    command -v moto_server
    return 0
  fi
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/agentd/moto-venv"
  if [ -x "$venv/bin/moto_server" ]; then
    echo "$venv/bin/moto_server"
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3 python3-venv python3-pip >&2 || return 1
  fi
  say "s3: installing moto[server] into $venv"
  if python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q 'moto[server]' >&2; then
    echo "$venv/bin/moto_server"
    return 0
  fi
  # No venv module: a plain pip install, as the last resort.
  python3 -m pip install -q 'moto[server]' >&2 || return 1
  command -v moto_server
}

s3_start() {
  local moto
  moto="$(s3_moto_server)" || return 1
  [ -n "$moto" ] || return 1
  S3_DIR="$(mktemp -d "${TMPDIR:-/tmp}/agentd-s3.XXXXXX")"
  on_exit "rm -rf '$S3_DIR'"
  local port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "$moto" -H 127.0.0.1 -p "$port" >"$S3_DIR/moto.log" 2>&1 &
  local pid=$!
  on_exit "kill $pid 2>/dev/null"
  # Answers once ListBuckets (GET /) does; moto takes a second or two to import.
  local i
  for i in $(seq 1 150); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" \
      >/dev/null 2>&1; then
      export AGENTD_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
      export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
      export AWS_EC2_METADATA_DISABLED=true
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "moto_server did not start:" >&2
  cat "$S3_DIR/moto.log" >&2
  return 1
}

if s3_start; then
  echo "s3: moto_server at $AGENTD_TEST_S3_ENDPOINT" >&2
else
  setup_failed "s3: moto_server could not be installed or started"
fi
