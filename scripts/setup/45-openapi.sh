# shellcheck shell=bash
# Checkers of what the API serves (sourced by scripts/test, which defines say and apt_install):
#   promtool                 from Debian's `prometheus` package (the only one that ships it), for
#                            `promtool check metrics` on /metrics (tests/it/metrics.rs)
#   openapi-spec-validator   from PyPI, in a cached virtualenv unless it is on PATH already, for
#                            /v1/openapi.json (tests/it/openapi.rs)
# and exports their paths:
#   AGENTD_TEST_PROMTOOL             the promtool binary
#   AGENTD_TEST_OPENAPI_VALIDATOR    the openapi-spec-validator command
# When a checker cannot be installed the run stops under CI (`setup_failed`); elsewhere its test skips.

openapi_validator() {
  if command -v openapi-spec-validator >/dev/null 2>&1 && openapi-spec-validator --help >/dev/null 2>&1; then
    command -v openapi-spec-validator
    return 0
  fi
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/agentd/openapi-venv"
  if [ -x "$venv/bin/openapi-spec-validator" ]; then
    echo "$venv/bin/openapi-spec-validator"
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3 python3-venv python3-pip >&2 || return 1
  fi
  say "openapi: installing openapi-spec-validator into $venv"
  python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q 'openapi-spec-validator>=0.7' >&2 || return 1
  echo "$venv/bin/openapi-spec-validator"
}

if command -v promtool >/dev/null 2>&1 || apt_install prometheus; then
  AGENTD_TEST_PROMTOOL="$(command -v promtool)"
  export AGENTD_TEST_PROMTOOL
  echo "metrics: promtool at $AGENTD_TEST_PROMTOOL" >&2
else
  setup_failed "metrics: promtool (Debian's prometheus package) could not be installed"
fi

if AGENTD_TEST_OPENAPI_VALIDATOR="$(openapi_validator)" && [ -n "$AGENTD_TEST_OPENAPI_VALIDATOR" ]; then
  export AGENTD_TEST_OPENAPI_VALIDATOR
  echo "openapi: validator at $AGENTD_TEST_OPENAPI_VALIDATOR" >&2
else
  unset AGENTD_TEST_OPENAPI_VALIDATOR
  setup_failed "openapi: openapi-spec-validator could not be installed"
fi
