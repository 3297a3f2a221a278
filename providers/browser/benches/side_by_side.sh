#!/usr/bin/env bash
# The browser computer's step beside the OpenAI sample's Playwright computer, in one run on this machine:
# both drive the same Chromium binary on the same page (see benches/step.rs and benches/playwright_step.py).
#   providers/browser/benches/side_by_side.sh [PYTHON_WITH_PLAYWRIGHT]
set -euo pipefail
cd "$(dirname "$0")/../../.."
python="${1:-python3}"
cargo bench -p agentd-browser --bench step 2>/dev/null | grep '^agentd-browser'
"$python" providers/browser/benches/playwright_step.py
cargo bench -p agentd-browser --bench step 2>/dev/null | grep '^agentd-browser'
