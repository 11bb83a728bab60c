#!/usr/bin/env bash
# The style checks: the lint stage of tools/run-tests.sh and `tox -e pep8`
# both run this list. RUFF names the ruff to use (default: the one on PATH);
# extra arguments go to ruff (--fix, say).
set -euo pipefail
cd "$(dirname "$0")/.."
"${RUFF:-ruff}" check cyborg tests tools "$@"
