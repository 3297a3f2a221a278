# shellcheck shell=bash
# Headless Chromium for the trajectory-report tests (sourced by scripts/test, which defines apt_install):
# `agentd export --html` is opened in it and must render every step.
#   AGENTD_TEST_CHROMIUM   the chromium binary
# Tests that need it and do not find the variable say "skipped: …" and pass.

apt_install chromium

AGENTD_TEST_CHROMIUM="$(command -v chromium)"
export AGENTD_TEST_CHROMIUM
