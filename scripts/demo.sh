#!/usr/bin/env bash
# Install agentkernel with JupyterLab and show the course: headless by default (executes one notebook with its
# scripted model and prints what the cells show), or `--lab` to open the notebooks in JupyterLab.
# Usage: scripts/demo.sh [--lab] [notebook]     (default notebook: notebooks/01_no_round_cap.ipynb)
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --disable-pip-version-check -e '.[lab]'

if [ "${1:-}" = "--lab" ]; then
    exec python -m jupyter lab notebooks/
fi
python scripts/demo.py "${1:-notebooks/01_no_round_cap.ipynb}"
