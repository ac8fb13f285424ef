#!/usr/bin/env bash
# Install the test extras (and Debian's Chromium for the browser suite) and run every test:
# unit and kernel tests, the JupyterLab + Chromium suite, and every teaching notebook through nbval.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python -m pip install -q --disable-pip-version-check -e '.[test,browser]'

python -m pytest tests notebooks --nbval "$@"
