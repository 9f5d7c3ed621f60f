"""The Run page in a real browser following a run while a writer appends to it: each new record's point appears in
the addressing film, and its step in "Latest step", within seconds and with no reload of the page.
(How long it takes is measured by benchmarks/monitor_browser.py.) A screenshot goes to test-artifacts/."""

from __future__ import annotations

import threading
import time

from run_helpers import EVERY, LAYER, ONSET, measures, start_run
from test_app_browser import ARTIFACTS, TIMEOUT_MS, browser, serve, settle  # noqa: F401 - browser: a fixture

from app.cli import RUN_ENV

DRAWN = """step => [...document.querySelectorAll('.js-plotly-plot')].some(plot => (plot._fullData || []).some(
    series => series.name === 'write spread' && Array.from(series.x || []).map(Number).includes(step)))"""
APPEAR_MS = 8_000  # each new point must be drawn within this (the page polls the run every second)


def latest_step(page) -> str:
    return (
        page.locator('[data-testid="stMetric"]')
        .filter(has_text="Latest step")
        .locator('[data-testid="stMetricValue"]')
        .inner_text()
    )


def test_the_run_page_draws_new_records_as_they_are_written_without_a_reload(browser, tmp_path):  # noqa: F811
    folder = tmp_path / "run"
    log = start_run(folder, last=500)
    server = serve({RUN_ENV: str(folder)}, "streamlit-run-server.log")
    url = next(server)
    try:
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.set_default_timeout(TIMEOUT_MS)
        loads: list[str] = []
        page.on("load", lambda loaded: loads.append(loaded.url))
        page.goto(f"{url}/run")
        page.wait_for_function(DRAWN, arg=500)
        settle(page)
        assert latest_step(page) == "500" and not page.get_by_text("collapsed to one place").count()
        steps = list(range(750, 2501, EVERY))
        appended: dict[int, float] = {}

        def write() -> None:  # the training run: a record every 0.7 s
            for step in steps:
                log.append(step, measures(step))
                appended[step] = time.monotonic()
                time.sleep(0.7)

        writer = threading.Thread(target=write, name="run-writer")
        writer.start()
        try:
            for step in steps:
                page.wait_for_function(DRAWN, arg=step, timeout=APPEAR_MS + 0.7 * 1000 * (step - 750) / EVERY)
        finally:
            writer.join()
        assert latest_step(page) == "2,500"
        page.get_by_text(f"{LAYER}: the writes collapsed to one place from step {ONSET:,}").wait_for(timeout=APPEAR_MS)
        assert len(loads) == 1  # the first load only: every point came without a reload
        page.screenshot(path=str(ARTIFACTS / "app-run.png"), full_page=True)
        page.close()
    finally:
        server.close()
