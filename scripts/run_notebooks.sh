#!/usr/bin/env bash
# Execute the teaching notebooks in place, storing fresh outputs (run after changing a notebook or the package).
# Usage: scripts/run_notebooks.sh [notebooks/NN_name.ipynb ...]   (default: all of notebooks/*.ipynb)
set -euo pipefail
cd "$(dirname "$0")/.."
notebooks=("$@")
[ ${#notebooks[@]} -gt 0 ] || notebooks=(notebooks/*.ipynb)
for nb in "${notebooks[@]}"; do
    echo "executing $nb"
    python -m jupyter nbconvert --to notebook --execute --inplace \
        --ExecutePreprocessor.timeout=120 --ExecutePreprocessor.store_widget_state=False \
        --ExecutePreprocessor.record_timing=False "$nb"
done
