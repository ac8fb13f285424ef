#!/usr/bin/env bash
# The project's test command: unit and kernel tests, the browser suite, and every notebook through nbval.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q
