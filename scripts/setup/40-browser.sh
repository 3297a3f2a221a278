# shellcheck shell=bash
# Headless Chromium for the web console's tests and latency benchmark (sourced by scripts/test, which defines
# apt_install). Exports:
#   AGENTD_TEST_CHROMIUM   the Chromium binary the tests drive over the DevTools protocol (testkit::browser)
# Tests that need it and do not find it say "skipping: …" and pass; CI installs it here, so they run.

apt_install chromium fonts-dejavu-core
if command -v chromium >/dev/null 2>&1; then
  AGENTD_TEST_CHROMIUM="$(command -v chromium)"
  export AGENTD_TEST_CHROMIUM
  say "browser: $("$AGENTD_TEST_CHROMIUM" --version 2>/dev/null | head -n 1)"
else
  say "browser: chromium is not installed; the console tests skip"
fi
