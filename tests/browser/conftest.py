"""Fixtures for the browser suite: one JupyterLab server and one Chromium for the module, one page per test.

A module that sets ``FRONT_END = "notebook"`` gets a Notebook 7 server instead; one that parametrizes
``lab_server`` (indirect, module scope) with ``["lab", "notebook"]`` runs on both.

The server and the browser are always stopped, also when a test or a fixture fails: each fixture ends them in a
``finally``. A failing test leaves a screenshot named ``FAILED-<test>.png`` in artifacts/browser/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lab import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    FRONT_ENDS,
    LABEXTENSION,
    MEASUREMENTS,
    LabServer,
    NotebookPage,
    start_lab,
)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASUREMENTS:
        terminalreporter.write_sep("-", "browser measurements")
        for line in MEASUREMENTS:
            terminalreporter.write_line(line)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "measurements.txt").write_text("\n".join(MEASUREMENTS) + "\n")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Debian Chromium of the test's own (the tests that start servers of their own: a reopened notebook,
    an nbconvert page); skips where there is none, fails where the front-end extension is not built."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}")
    if not (LABEXTENSION / "package.json").exists():
        pytest.fail(f"the front-end extension is not built in {LABEXTENSION}: pip install -e . (or jlpm build)")
    sync_api = pytest.importorskip("playwright.sync_api")
    playwright = sync_api.sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


@pytest.fixture(params=["lab", "notebook"])
def front_end(request: pytest.FixtureRequest) -> str:
    """Each front end in turn (a test that starts its servers itself), skipped where it is not installed."""
    pytest.importorskip({"lab": "jupyterlab", "notebook": "notebook"}[request.param])
    return str(request.param)


@pytest.fixture(scope="module")
def lab_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    # A module picks its front end with FRONT_END, or runs on both with an indirect parametrize of lab_server.
    front_end = getattr(request, "param", None) or getattr(request.module, "FRONT_END", "lab")
    pytest.importorskip(FRONT_ENDS[front_end])
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set AGENTKERNEL_CHROMIUM)")
    root = tmp_path_factory.mktemp("lab-root")
    work = tmp_path_factory.mktemp("lab-work")
    server = start_lab(root, work, front_end=front_end)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory, lab_server: LabServer) -> Iterator[object]:
    """Debian's Chromium, headless, with a fresh profile (never a Playwright browser download)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    playwright = sync_api.sync_playwright().start()
    try:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()
    finally:
        playwright.stop()


@pytest.fixture
def open_notebook(request: pytest.FixtureRequest, lab_server: LabServer,
                  browser_context: object) -> Iterator[Callable[[str], NotebookPage]]:
    """Open a notebook of the server's root in a new page; on teardown close it and shut its kernel down."""
    pages: list[NotebookPage] = []

    def open_(name: str) -> NotebookPage:
        pages.append(NotebookPage(browser_context, lab_server, name))
        return pages[-1]

    try:
        yield open_
    finally:
        report = getattr(request.node, "report_call", None)
        for page in pages:
            try:
                if report is not None and report.failed:
                    page.shot(f"FAILED-{request.node.name}")
            finally:
                page.close()
