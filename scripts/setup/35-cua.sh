# shellcheck shell=bash
# cua's computer-server for the computer-server provider's tests (sourced by scripts/test, which defines say,
# apt_install and on_exit).
#
# Installs a pinned cua-computer-server from PyPI into a cached virtualenv made with Python 3.12 (the
# package needs ≥ 3.12) and exports:
#   AGENTD_TEST_CUA_PYTHON   that virtualenv's python: the tests start `python -m computer_server` on Xvfb
#                            displays and ports of their own (so that they can kill and restart it)
# FastAPI is pinned below 0.141 too: computer-server 0.3.x does not declare an upper bound and newer FastAPI
# releases are not what it was tested with. Without Python 3.12 or PyPI the run stops under CI
# (`setup_failed`); elsewhere the computer-server tests skip.

CUA_SERVER_VERSION=0.3.46
CUA_FASTAPI_VERSION=0.140.13

cua_python312() {
  local candidate
  for candidate in "$(command -v python3.12 2>/dev/null)" "$HOME"/.pyenv/versions/3.12*/bin/python3.12 \
    /usr/local/bin/python3.12 /usr/bin/python3.12; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import venv, ensurepip' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  # Ubuntu 24.04 and Debian 13 ship 3.12 or newer as python3.12 / python3.
  apt_install python3.12 python3.12-venv >&2 2>/dev/null || return 1
  command -v python3.12
}

cua_setup() {
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/agentd/cua-server-$CUA_SERVER_VERSION"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import computer_server' >/dev/null 2>&1; then
    local python
    python="$(cua_python312)" || { echo "cua: no Python 3.12 found" >&2; return 1; }
    say "cua: installing cua-computer-server $CUA_SERVER_VERSION into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2 || return 1
    "$venv/bin/pip" install -q "cua-computer-server==$CUA_SERVER_VERSION" "fastapi==$CUA_FASTAPI_VERSION" >&2 \
      || { rm -rf "$venv"; return 1; }
  fi
  export AGENTD_TEST_CUA_PYTHON="$venv/bin/python"
}

if cua_setup; then
  echo "cua: computer-server $CUA_SERVER_VERSION at $AGENTD_TEST_CUA_PYTHON" >&2
else
  setup_failed "cua: computer-server $CUA_SERVER_VERSION could not be installed"
fi
