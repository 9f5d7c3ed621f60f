"""From a record written to a run folder to its point drawn on the explorer's Run page, in a real browser.

A run folder is started with the run log's writer (``tensor_memory.training.run_log.RunLog``: the header, then one
record per step of one memory layer), the explorer is started on it as ``tensor-memory app --run`` starts it
(``python -m app`` with the run named) and headless Chromium opens its Run page. Then a record is appended every
``--interval`` seconds, ``--records`` times; each is timed from the moment its line is in the file until the
addressing film in the page holds its step (read from the Plotly figure's drawn data, checked every animation
frame). The page is never reloaded: it draws what its poll of the run (every second) found.

Printed: the seconds until the first film is drawn, and the time from record to drawn point: p50, p95 and max.
Needs Debian's /usr/bin/chromium.

    .venv/bin/python benchmarks/monitor_browser.py
    .venv/bin/python benchmarks/monitor_browser.py --records 20 --interval 1.3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app_browser import CHROMIUM, start_server  # noqa: E402
from torch import nn  # noqa: E402

from app.cli import RUN_ENV  # noqa: E402
from tensor_memory import MemoryConfig, TensorMemory  # noqa: E402
from tensor_memory.training.run_log import RunLog  # noqa: E402

LAYER = "blocks.1"
DRAWN = """step => [...document.querySelectorAll('.js-plotly-plot')].some(plot => (plot._fullData || []).some(
    series => series.name === 'write spread' && Array.from(series.x || []).map(Number).includes(step)))"""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=10, help="records appended and timed (default 10)")
    p.add_argument(
        "--interval",
        type=float,
        default=1.7,
        help="seconds between two records (default 1.7: not a multiple of the page's 1 s poll, so the records "
        "land at every phase of it)",
    )
    return p.parse_args()


def record(step: int) -> dict[str, dict[str, float]]:
    """The memory layer's addressing at ``step``: healthy numbers that change with the step."""
    return {LAYER: {"write_spread_voxels": 2.0 + step / 1000, "sigma_voxels": 1.0, "boundary_fraction": 0.1}}


def start_run(folder: Path) -> RunLog:
    """A run folder of a model with one memory layer (at ``blocks.1``), holding the record of step 0."""
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Identity(), TensorMemory(MemoryConfig(token_dim=8, grid=(4, 4, 4)))])
    log = RunLog(folder).start(model, every=10, snapshot_every=None, writer="benchmarks/monitor_browser.py")
    log.append(0, record(0), loss=1.0)
    return log


def times(log: RunLog, url: str, records: int, interval: float) -> tuple[float, list[float]]:
    """(seconds until the Run page first draws the film, seconds from each record written to its point drawn)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.set_default_timeout(600_000)
        opened = time.perf_counter()
        page.goto(f"{url}/run")
        page.wait_for_function(DRAWN, arg=0, polling="raf")
        first = time.perf_counter() - opened
        latencies = []
        for n in range(1, records + 1):
            time.sleep(interval)
            log.append(10 * n, record(10 * n), loss=1.0 / (n + 1))
            written = time.perf_counter()
            page.wait_for_function(DRAWN, arg=10 * n, polling="raf")
            latencies.append(time.perf_counter() - written)
        browser.close()
    return first, latencies


def main() -> None:
    args = parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"needs Debian's chromium at {CHROMIUM}: sudo apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as folder:
        log = start_run(Path(folder) / "run")
        os.environ[RUN_ENV] = str(log.folder)  # as `tensor-memory app --run` passes it to the server
        server, url = start_server("prepared")
        try:
            first, latencies = times(log, url, args.records, args.interval)
        finally:
            server.terminate()
            server.wait(timeout=30)
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"Run page first drawn: {first:.1f} s after opening it (the server just started)")
    print(
        f"record written → point drawn, {len(latencies)} records every {args.interval} s: "
        f"p50 {statistics.median(latencies):.2f} s, p95 {p95:.2f} s, max {max(latencies):.2f} s"
    )
    print("each (s): " + ", ".join(f"{t:.2f}" for t in latencies))


if __name__ == "__main__":
    main()
