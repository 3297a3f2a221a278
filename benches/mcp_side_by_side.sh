#!/usr/bin/env bash
# Computer tools through MCP, side by side on one Xvfb display (1280x800, an xterm on it): agentd's
# `agentd mcp --local --computer` over stdio, agentd's daemon `/mcp` (`lease_computer` on a pool desktop of the
# same display) and cua computer-server's `/mcp`, driven by the official MCP Python SDK's client
# (benches/support/mcp_round_trip.py): a screenshot, and a click with the screenshot after it, median and p95;
# then `run_task`'s overhead over `agentd run` for the mock desktop's login task.
#
#   benches/mcp_side_by_side.sh [ROUNDS]
#
# Needs Xvfb and xterm, the MCP SDK's Python ($AGENTD_TEST_MCP_PYTHON, scripts/setup/50-mcp.sh) and cua's
# ($AGENTD_TEST_CUA_PYTHON, scripts/setup/35-cua.sh). Builds agentd with the release profile, unless
# $AGENTD_BIN names a binary to measure.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-100}"
: "${AGENTD_TEST_MCP_PYTHON:?the MCP SDK Python (scripts/setup/50-mcp.sh)}"
: "${AGENTD_TEST_CUA_PYTHON:?the Python of cua computer-server (scripts/setup/35-cua.sh)}"
if [ -z "${AGENTD_BIN:-}" ]; then
  cargo build --release --bin agentd >&2
fi
agentd="${AGENTD_BIN:-$PWD/target/release/agentd}"

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 1200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listened on port $1 within 120 s" >&2
  return 1
}

display=":$((200 + RANDOM % 200))"
Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp >"$work/xvfb.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -S "/tmp/.X11-unix/X${display#:}" ] && break; sleep 0.1; done
DISPLAY="$display" xterm -geometry 100x30+50+50 >/dev/null 2>&1 &
pids+=($!)

cua_port="$(free_port)"
(cd "$work" && env -u CONTAINER_NAME DISPLAY="$display" "$AGENTD_TEST_CUA_PYTHON" -m computer_server \
  --host 127.0.0.1 --port "$cua_port" --log-level warning >"$work/cua.log" 2>&1) &
pids+=($!)

api_port="$(free_port)"
token="bench-token-0123456789abcdef0123456789"
printf '%s' "$token" >"$work/token"
cat >"$work/agentd.toml" <<EOF
data_dir = "$work/data"
[api]
socket = "$work/agentd.sock"
listen = "127.0.0.1:$api_port"
token_file = "$work/token"
[[desktops]]
name = "bench"
computer = { provider = "local", display = "$display" }
EOF
{ sed 's#^data_dir = .*#data_dir = "'"$work"'/data-raw"#; /^\[api\]/,$d' "$work/agentd.toml"; printf '[settle]\nenabled = false\n'; } \
  >"$work/no-settle.toml"
printf '{"provider": "local", "display": "%s"}' "$display" >"$work/computer.json"
cat >"$work/login.json" <<EOF
{"instructions": "Log in as alice and open Reports", "computer": {"provider": "mock", "scene": "login"},
 "model": {"provider": "scripted", "script": "$PWD/config/scripts/mock-login.json"},
 "limits": {"max_steps": 10, "timeout_secs": 120}}
EOF
"$agentd" --config "$work/agentd.toml" serve >"$work/serve.log" 2>&1 &
pids+=($!)

wait_port "$cua_port"
wait_port "$api_port"
"$AGENTD_TEST_MCP_PYTHON" benches/support/mcp_round_trip.py --agentd "$agentd" --config "$work/agentd.toml" \
  --config-no-settle "$work/no-settle.toml" --computer "$work/computer.json" --cua "http://127.0.0.1:$cua_port/mcp" --rounds "$rounds" \
  --daemon-url "http://127.0.0.1:$api_port/mcp" --token "$token" --desktop bench --task "$work/login.json"
