"""The dashboard in a real browser: `recadvisor dashboard` serving the conftest's root, each page
opened by URL in Debian's Chromium (Playwright), checked for its content, and screenshotted to
test-artifacts/dashboard/<page>.png.

Chromium is /usr/bin/chromium (apt package `chromium`); without it these tests skip, unless
RECADVISOR_REQUIRE_BROWSER=1 (CI), where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.dashboard.conftest import CORRUPT_RUN, SLOW_PRESET, run_key

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails) saying so
    expect = None

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
CHROMIUM = Path("/usr/bin/chromium")
# Without the network flags Chromium's own connections are refused on a closed network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
# Tall: Streamlit's main area scrolls inside the page, so full_page screenshots stop at the fold.
VIEWPORT = {"width": 1400, "height": 3000}
MAX_SHOT_HEIGHT = 8000
START_TIMEOUT_S = 60
WAIT_MS = 90_000  # the first analysis of a run takes seconds on a loaded 2-core machine


def _browser_missing(why: str) -> None:
    if os.environ.get("RECADVISOR_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why} (RECADVISOR_REQUIRE_BROWSER=1)")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the server (the CLI execs Streamlit) and anything it started."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=15)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(dash_root: Path, tmp_path_factory) -> Iterator[tuple[str, int, subprocess.Popen]]:
    """`recadvisor dashboard --root dash_root` on a free port: (base URL, port, process)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("dashboard-server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recadvisor", "dashboard", "--root", str(dash_root),
             "--port", str(port)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"recadvisor dashboard exited with {proc.returncode} before "
                            f"listening:\n{log.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"recadvisor dashboard not listening on port {port} after "
                            f"{START_TIMEOUT_S} s:\n{log.read_text(errors='replace')}")
            time.sleep(0.25)
        yield f"http://127.0.0.1:{port}", port, proc
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        _browser_missing(f"chromium is not installed ({CHROMIUM} missing; apt-get install "
                         "chromium)")
    if expect is None:
        _browser_missing("the playwright package is not installed (pip install -e '.[dev]')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, server, request):
    """A fresh browser context (a new Streamlit session) per test; a screenshot and the page's
    text are saved as <test>-failure.* when the test fails."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    failed_before = request.session.testsfailed
    yield pg
    try:
        if request.session.testsfailed > failed_before:
            name = request.node.name
            _screenshot(pg, f"{name}-failure")
            (ARTIFACTS / f"{name}-failure.txt").write_text(pg.inner_text("body"))
    finally:
        context.close()


def _screenshot(page, name: str) -> Path:
    """Save the whole page: the viewport grows to the main area's height first (capped).
    Charts and code blocks are loaded lazily: their grey placeholders must be gone."""
    expect(page.get_by_test_id(re.compile(r"^stSkeleton"))).to_have_count(0, timeout=WAIT_MS)
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
        " return m ? m.scrollHeight : document.documentElement.scrollHeight; }")
    if height > VIEWPORT["height"]:
        page.set_viewport_size({"width": VIEWPORT["width"],
                                "height": min(int(height), MAX_SHOT_HEIGHT)})
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def _no_crash(page) -> None:
    """Once the script run has finished: no uncaught exception box and no traceback text."""
    expect(page.get_by_test_id("stApp")).to_have_attribute(
        "data-test-script-state", "notRunning", timeout=WAIT_MS)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    assert "Traceback" not in page.content()


def _exactly(text: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(text)}$")


def _grid_cells(page, header: str) -> str:
    """A selector for the cells of the st.dataframe column `header`. The grid is drawn on a
    canvas; the text is only in the canvas's accessibility table (hidden: matched by text
    content), which holds the columns in view."""
    grid = page.get_by_test_id("stDataFrame")
    col = grid.locator("th[role=columnheader]").filter(has_text=_exactly(header)).get_attribute(
        "aria-colindex")
    return f"td[role=gridcell][aria-colindex='{col}']"


def test_listens_on_loopback_only(server):
    _, port, proc = server
    family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    listening = []
    for p in family:
        conns = p.net_connections(kind="inet") if hasattr(p, "net_connections") \
            else p.connections(kind="inet")
        listening += [c for c in conns
                      if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening, f"no process of the dashboard listens on port {port}"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening


def test_runs_page(page, server, dash_root):
    base, _, _ = server
    page.goto(base + "/")
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_role("heading", name="Upload a trace")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_role("heading", name="Open a path under the root")).to_be_visible(
        timeout=WAIT_MS)
    grid = page.get_by_test_id("stDataFrame")
    expect(grid.locator("td[role=gridcell]").first).to_be_attached(timeout=WAIT_MS)

    slow, clean = run_key(dash_root, SLOW_PRESET), run_key(dash_root, "clean")
    run_cell = _grid_cells(page, "run")
    for key in (slow, clean, CORRUPT_RUN):
        expect(grid.locator(run_cell, has_text=_exactly(key))).to_have_count(1)
    # The top-finding column (every run analyzed): the slow run's input pipeline.
    slow_row = grid.locator("tr", has=page.locator(run_cell, has_text=_exactly(slow)))
    expect(slow_row.locator(_grid_cells(page, "top finding"))).to_have_text(
        re.compile(r"^high: input_preprocessing \(\d+\.\d\dx\)$"))
    # The corrupt run is one error line above the table, not a crash.
    expect(page.get_by_test_id("stAlertContentError").filter(
        has_text="logdirs/corrupt")).to_contain_text("not a valid xplane")
    _no_crash(page)
    _screenshot(page, "runs")


def test_diagnosis_page(page, server, dash_root):
    base, _, _ = server
    page.goto(f"{base}/diagnosis?run={run_key(dash_root, SLOW_PRESET)}")
    title = page.get_by_text("The input pipeline holds up training")
    expect(title).to_be_visible(timeout=WAIT_MS)
    card = page.get_by_test_id("stLayoutWrapper").filter(has=title)
    expect(card).to_have_count(1)
    expect(card).to_contain_text("input_preprocessing")
    expect(card.get_by_test_id("stCode").first).to_have_text(re.compile(r"^recadvisor train "))
    # The last element of the page: the script ran to its end.
    expect(page.get_by_text("D = uninterruptible")).to_be_visible(timeout=WAIT_MS)
    charts = page.locator(".js-plotly-plot")
    expect(charts.nth(2)).to_be_visible(timeout=WAIT_MS)  # breakdown, timeline, thread states
    assert charts.count() >= 3
    for name in ("Step time by category", "Timeline of step", "Thread states (OS sampler)"):
        expect(page.locator(".js-plotly-plot", has_text=name)).to_have_count(1)
    _no_crash(page)
    _screenshot(page, "diagnosis")


def test_compare_page(page, server, dash_root):
    base, _, _ = server
    before, after = run_key(dash_root, SLOW_PRESET), run_key(dash_root, "clean")
    page.goto(f"{base}/compare?before={before}&after={after}")
    resolved = page.get_by_test_id("stColumn").filter(
        has=page.get_by_role("heading", name="Resolved", exact=True))
    expect(resolved).to_be_visible(timeout=WAIT_MS)
    # Fixed: resolved, or down to `low` (a busy 2-core machine can leave a 1.02x input wait).
    remaining = page.get_by_test_id("stColumn").filter(
        has=page.get_by_role("heading", name="Remaining", exact=True))
    expect(remaining).to_be_visible()
    low = re.search(r"input_preprocessing: (high|medium) -> low", remaining.inner_text())
    if not low:
        expect(resolved).to_contain_text("input_preprocessing")
    speedup = page.get_by_test_id("stMetric").filter(has_text="speedup")
    expect(speedup).to_be_visible()
    value = speedup.get_by_test_id("stMetricValue")
    expect(value).to_have_text(re.compile(r"^\d+\.\d\dx$"))
    assert float(value.inner_text().rstrip("x")) > 1.0, value.inner_text()
    expect(page.get_by_role("heading", name="Findings side by side")).to_be_visible()
    expect(page.locator(".js-plotly-plot", has_text="before and after")).to_have_count(1)
    _no_crash(page)
    _screenshot(page, "compare")


def test_tuning_page(page, server):
    base, _, _ = server
    page.goto(base + "/tuning")
    storage = page.get_by_role("combobox", name="study storage")
    expect(storage).to_have_value("tune/study.db", timeout=WAIT_MS)  # the first, by default
    # Pick the study file; notes.db (not an Optuna database) is not offered.
    storage.click()
    options = page.get_by_role("option")
    expect(options).to_have_text(["tune/study.db", "storage URL…"])
    options.filter(has_text="tune/study.db").click()
    expect(options).to_have_count(0)
    expect(storage).to_have_value("tune/study.db")
    storage.blur()  # no focus ring in the screenshot

    study = page.get_by_role("combobox", name="study", exact=True)
    expect(study).to_have_value("recadvisor", timeout=WAIT_MS)
    expect(page.get_by_role("heading", name=re.compile(r"^Best configuration"))).to_be_visible(
        timeout=WAIT_MS)
    expect(page.get_by_test_id("stCode").first).to_have_text(re.compile(r"^recadvisor train "))
    expect(page.locator(".js-plotly-plot", has_text="Optimization history")).to_be_visible(
        timeout=WAIT_MS)
    expect(page.get_by_test_id("stExpander").filter(has_text="all 8 trials")).to_be_visible(
        timeout=WAIT_MS)
    _no_crash(page)
    _screenshot(page, "tuning")

    # The multi-objective study has a Pareto front.
    study.click()
    expect(options).to_have_text(["recadvisor", "pareto"])
    options.filter(has_text=_exactly("pareto")).click()
    expect(study).to_have_value("pareto")
    study.blur()
    expect(page.locator(".js-plotly-plot", has_text="Pareto front")).to_be_visible(
        timeout=WAIT_MS)
    _no_crash(page)
    _screenshot(page, "tuning-pareto")


def test_bad_input(page, server):
    base, _, _ = server
    page.goto(base + "/diagnosis?run=../../../etc")
    expect(page.get_by_test_id("stAlertContentError")).to_contain_text(
        "outside the dashboard root", timeout=WAIT_MS)
    expect(page.get_by_role("heading", name="Diagnosis", exact=True)).to_be_visible()
    _no_crash(page)
    _screenshot(page, "bad-input-path")

    page.goto(base + "/")
    expect(page.get_by_role("heading", name="Upload a trace")).to_be_visible(timeout=WAIT_MS)
    page.get_by_test_id("stFileUploader").locator("input[type=file]").set_input_files(
        files=[{"name": "broken.xplane.pb", "mimeType": "application/octet-stream",
                "buffer": b"\x0a\xff\xff\xff\x0f garbage, not an XSpace protobuf"}])
    error = page.get_by_test_id("stAlertContentError").filter(has_text="broken.xplane.pb")
    expect(error).to_be_visible(timeout=WAIT_MS)
    text = error.inner_text().strip()
    assert text.startswith("upload broken.xplane.pb:") and "\n" not in text, text
    expect(page.get_by_test_id("stAlertContentSuccess")).to_have_count(0)
    _no_crash(page)
    _screenshot(page, "bad-input-upload")
