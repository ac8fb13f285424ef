#!/usr/bin/env bash
# Install the test extras (and Debian's Chromium for the browser suite) and run every check: ruff, mypy, every
# teaching notebook through nbval (twice), the unit and kernel tests and the JupyterLab + Chromium suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python -m pip install -q --disable-pip-version-check -e '.[test,browser]'

python -m ruff check .
python -m mypy
# The notebooks run twice (here, then in the full run below): their saved outputs must hold run after run.
python -m pytest -q -p no:cacheprovider --nbval notebooks
python -m pytest tests notebooks --nbval "$@"
