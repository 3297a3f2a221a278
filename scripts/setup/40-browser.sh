# shellcheck shell=bash
# Headless Chromium for the web console's tests, the trajectory-report tests (`agentd export --html` opened
# in it) and the console latency benchmark (sourced by scripts/test, which defines apt_install). Exports:
#   AGENTD_TEST_CHROMIUM   the Chromium binary the tests drive over the DevTools protocol (testkit::browser)
# Without it the run stops under CI (`setup_failed`); elsewhere the tests that need it skip.

apt_install chromium fonts-dejavu-core
if command -v chromium >/dev/null 2>&1; then
  AGENTD_TEST_CHROMIUM="$(command -v chromium)"
  export AGENTD_TEST_CHROMIUM
  say "browser: $("$AGENTD_TEST_CHROMIUM" --version 2>/dev/null | head -n 1)"
else
  setup_failed "browser: chromium could not be installed"
fi
