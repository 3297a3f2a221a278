# shellcheck shell=bash
# The official MCP Python SDK, whose real clients (stdio and Streamable HTTP) the MCP tests drive agentd
# with (sourced by scripts/test, which defines say, apt_install and setup_failed).
#
# Installs a pinned `mcp` from PyPI into a cached virtualenv and exports:
#   AGENTD_TEST_MCP_PYTHON   that virtualenv's python: tests/it/mcp.rs runs tests/mcp/client.py with it
# Without PyPI the run stops under CI (`setup_failed`); elsewhere the MCP tests skip.

MCP_PY_VERSION=2.3.0

mcp_setup() {
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/agentd/mcp-$MCP_PY_VERSION"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
      apt_install python3 python3-venv python3-pip >&2 || return 1
    fi
    say "mcp: installing the MCP Python SDK (mcp $MCP_PY_VERSION) into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 || return 1
    "$venv/bin/pip" install -q "mcp==$MCP_PY_VERSION" >&2 || { rm -rf "$venv"; return 1; }
  fi
  export AGENTD_TEST_MCP_PYTHON="$venv/bin/python"
}

if mcp_setup; then
  echo "mcp: Python SDK $MCP_PY_VERSION at $AGENTD_TEST_MCP_PYTHON" >&2
else
  setup_failed "mcp: the MCP Python SDK (mcp $MCP_PY_VERSION) could not be installed"
fi
