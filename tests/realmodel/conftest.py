"""Fixtures for the ``realmodel`` tests: a llama.cpp server for the session, or one of a test's own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # llama_server, shared with the scripts (tests/conftest.py adds support/)

from llama_server import LlamaServer  # noqa: E402
from realmodel_support import start_or_skip, wait_idle  # noqa: E402


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One server for the session (starting one takes about a second; the model is loaded once)."""
    server = start_or_skip(tmp_path_factory.mktemp("llama") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def idle_llama(llama: LlamaServer) -> Iterator[LlamaServer]:
    """The session's server, idle before the test and left idle after it (a test never waits on another's run)."""
    wait_idle(llama, 30)
    yield llama
    wait_idle(llama, 30)


@pytest.fixture
def own_llama(tmp_path: Path) -> Iterator[LlamaServer]:
    """A server of the test's own, which the test may stop."""
    server = start_or_skip(tmp_path / "server.log")
    try:
        yield server
    finally:
        server.stop()
