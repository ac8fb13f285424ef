#!/usr/bin/env bash
# Install agentkernel with JupyterLab and show the course: headless by default (executes one notebook with its
# scripted model and prints what the cells show), or `--lab` to open the notebooks in JupyterLab, passing any further
# arguments to `jupyter lab` (`--lab --port 8890 --no-browser`); run as root, it adds --allow-root.
# Usage: scripts/demo.sh [notebook]     (default notebook: notebooks/01_no_round_cap.ipynb)
#        scripts/demo.sh --lab [jupyter lab arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --disable-pip-version-check -e '.[lab]'

if [ "${1:-}" = "--lab" ]; then
    shift
    if [ "$(id -u)" = 0 ]; then
        set -- --allow-root "$@"  # else Jupyter stops at "Running as root is not recommended"
    fi
    exec python -m jupyter lab notebooks/ "$@"
fi
python scripts/demo.py "${1:-notebooks/01_no_round_cap.ipynb}"
