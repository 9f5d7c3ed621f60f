"""The explorer app's speed: stepping a chunk with the trace cached, and the first page after a start.

Measured side by side in one run:

1. Server-side step time on the Export page of the default checkpoint (occlusion-tensor), which draws
   the whole Explore figure set of the chunk its browser stepper reports (Explore itself steps in the
   browser alone: ``benchmarks/app_browser.py``), with the trace cached: Streamlit's AppTest reports
   the chunks "Next"/"Previous" would show, back and forth over every chunk, and times each full
   script run. Two paces: back to back, and with a pause between steps as a person stepping (or
   Play) leaves.
2. What a step would cost without the figure cache: building one chunk's figures (the seven
   Explore figures and the annotation track) from the cached trace, and one chunk's PyVista
   volume rendering (a fresh render window, and per chunk when every chunk of a sample is rendered
   in one window, as the app does).
3. Time from starting ``streamlit run app/main.py`` (a new process: nothing cached) until headless
   Chromium shows the first page settled: the "Chunk k / K" counter and the Plotly 3D scenes (PyVista
   is off until asked for). Needs /usr/bin/chromium.
4. A long trace: occlusion-tensor captured on ``--long-chunks`` frames (int8 volumes), opened with
   ``tensor-memory app --trace``: the seconds from starting the server until Chromium shows its first page (the
   overview and the first page of 64 chunks drawn: a long trace opens on its first chunk), each step in the browser
   (Next, turning back at the page's ends; from the click until the new counter is shown and two frames are
   painted), and a page turn (the "Chunks a–b" button: the server draws the next 64 chunks, shown from the first).

    .venv/bin/python benchmarks/app.py
    .venv/bin/python benchmarks/app.py --steps 60 --pause 1.0 --starts 3
    .venv/bin/python benchmarks/app.py --only-long --long-chunks 2000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = Path("/usr/bin/chromium")

from app_browser import start_server  # noqa: E402  (this folder: `streamlit run app/main.py`, once it answers)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="steps timed per pace (default 30)")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between steps at a person's pace (default 1.0)")
    p.add_argument("--starts", type=int, default=1, help="server starts to time (default 1)")
    p.add_argument("--long-chunks", type=int, default=2000, help="chunks of the long trace (default 2000)")
    p.add_argument("--only-long", action="store_true", help="measure the long trace only (part 4)")
    return p.parse_args()


def summary(times_s: list[float]) -> str:
    ms = sorted(t * 1000 for t in times_s)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"{statistics.median(ms):8.0f} {p90:8.0f} {ms[-1]:8.0f}"


def step_times(steps: int, pause: float) -> tuple[list[float], list[str]]:
    """Seconds per step of the Export page (a fresh AppTest session; caches are per process): the value the
    browser's stepper sends for each chunk it shows, and the run that draws that chunk."""
    import json

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=300).run()
    at.switch_page("views/export.py").run()
    if at.exception:
        raise RuntimeError(f"the app failed: {at.exception[0].value}")
    sent = json.loads(at.get("component_instance")[0].proto.json_args)["payload"]
    last = sent["total"] - 1
    times, counters, direction = [], [], 1
    for _ in range(steps):
        chunk = int(at.session_state["chunk"])
        if not 0 <= chunk + direction <= last:
            direction = -direction
        at.session_state["export_stepper"] = {
            "chunk": chunk + direction,
            "sample": sent["sample"],
            "moves": sent["moves"],
        }
        time.sleep(pause)
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
        counters.append(f"Chunk {at.session_state['chunk']} / {last}")
        if at.exception:
            raise RuntimeError(f"the app failed: {at.exception[0].value}")
    return times, counters


def build_times(repeats: int = 12) -> dict[str, list[float]]:
    """Seconds to build one chunk's figures, and to render its PyVista volume, from the cached trace."""
    from analysis import capture
    from analysis.figures.annotations import annotation_figure
    from analysis.figures.frames import volume_frames
    from analysis.figures.views import explore_figures
    from analysis.measures.volumes import state_series

    trace = capture(ROOT / "checkpoints" / "occlusion-tensor", progress=False)
    series = state_series(trace.layer(), "h", "norm")
    out: dict[str, list[float]] = {"figures": [], "fresh": [], "block": []}
    for i in range(repeats):
        chunk = i % trace.num_chunks
        start = time.perf_counter()
        explore_figures(trace, chunk, None, series)
        annotation_figure(trace, chunk)
        out["figures"].append(time.perf_counter() - start)
    for i in range(3):
        start = time.perf_counter()
        volume_frames(series.values[i : i + 1], series.value_range)
        out["fresh"].append(time.perf_counter() - start)
        start = time.perf_counter()
        volume_frames(series.values, series.value_range)  # as the app renders a sample: every chunk at once
        out["block"].append((time.perf_counter() - start) / len(series.values))
    return out


def first_page_time() -> tuple[float, float]:
    """(seconds to /_stcore/health ok, seconds to the first page settled in Chromium) after starting the server."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1800})
        page.set_default_timeout(300_000)
        start = time.perf_counter()
        server, url = start_server("plain")
        try:
            healthy = time.perf_counter() - start
            page.goto(url)
            stepper = page.frame_locator('iframe[title*="chunk_stepper"]')  # Explore's in-browser stepper
            stepper.get_by_text("Chunk ", exact=False).first.wait_for()
            stepper.locator(".js-plotly-plot .gl-container canvas").nth(1).wait_for()
            drawn = time.perf_counter() - start
        finally:
            server.terminate()
            server.wait(timeout=30)
            browser.close()
    return healthy, drawn


def long_trace_times(chunks: int, steps: int) -> dict[str, object]:
    """Part 4: a ``chunks``-frame trace opened in the app: seconds to the first page, per browser step, a page turn."""
    import tempfile

    from playwright.sync_api import sync_playwright

    from analysis import capture

    start = time.perf_counter()
    trace = capture(ROOT / "checkpoints" / "occlusion-tensor", frames=chunks, volumes="int8", progress=False)
    folder = Path(tempfile.mkdtemp(prefix="long-trace-"))
    path = trace.save(folder / "long.trace.safetensors")
    captured = time.perf_counter() - start
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1800})
        page.set_default_timeout(300_000)
        start = time.perf_counter()
        server, url = start_server("plain", path)
        try:
            page.goto(url)
            stepper = page.frame_locator('iframe[title*="chunk_stepper"]')
            stepper.get_by_text("Chunk ", exact=False).first.wait_for()
            stepper.locator(".js-plotly-plot .gl-container canvas").nth(1).wait_for()
            page.get_by_text("the whole trace", exact=False).first.wait_for()  # the overview
            opened = time.perf_counter() - start
            frame = next(f for f in page.frames if "chunk_stepper" in f.url)
            times, direction = [], 1
            for _ in range(steps):
                k = int(frame.locator("#counter").inner_text().split()[1])
                name = "Next" if direction > 0 else "Previous"
                if frame.get_by_role("button", name=name, exact=True).is_disabled():
                    direction, name = -direction, "Previous" if direction > 0 else "Next"
                began = time.perf_counter()
                frame.get_by_role("button", name=name, exact=True).click()
                frame.get_by_text(f"Chunk {k + direction} / ", exact=False).first.wait_for()
                frame.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
                times.append(time.perf_counter() - began)
            k = int(frame.locator("#counter").inner_text().split()[1])
            following = k // 64 * 64 + 64  # a long trace opens on its first page: the next one opens on its first chunk
            began = time.perf_counter()
            page.get_by_role("button", name=f"Chunks {following}–", exact=False).click()
            stepper.get_by_text(f"Chunk {following} / ", exact=False).first.wait_for()
            stepper.locator(".js-plotly-plot").filter(has_text=f"after chunk {following}").first.wait_for()
            turned = time.perf_counter() - began
        finally:
            server.terminate()
            server.wait(timeout=30)
            browser.close()
    return {
        "captured": captured,
        "megabytes": path.stat().st_size / 1e6,
        "opened": opened,
        "steps": times,
        "turned": turned,
    }


def print_long(args: argparse.Namespace) -> None:
    long = long_trace_times(args.long_chunks, args.steps)
    print(
        f"\nA {args.long_chunks:,}-chunk trace (occlusion-tensor, int8: captured in {long['captured']:.1f} s, "
        f"{long['megabytes']:.0f} MB), `tensor-memory app --trace`:\n"
    )
    print(f"{'what':<62} {'median':>8} {'p90':>8} {'max':>8}   (ms)")
    print(f"{'a step in the browser (Next / Previous)':<62} {summary(long['steps'])}")
    print(f"\n{'server start to the first page drawn (overview, 64 chunks)':<62} {long['opened']:8.1f} s")
    print(f"{'a page turn (the server draws another 64 chunks)':<62} {long['turned']:8.1f} s")
    print("\nTargets: a 2,000-chunk trace opens in < 30 s and steps in < 150 ms.")


def main() -> None:
    args = parse_args()
    import torch

    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if args.only_long:
        print_long(args)
        return
    fast, counters = step_times(args.steps, 0.0)
    paced, _ = step_times(args.steps, args.pause)
    built = build_times()
    print(
        f"\nStepping the Export page of occlusion-tensor, trace cached ({args.steps} steps each, "
        f"{counters[0]} … {counters[-1]}):\n"
    )
    print(f"{'what':<62} {'median':>8} {'p90':>8} {'max':>8}   (ms)")
    print(f"{'server-side step (Export page), back to back':<62} {summary(fast)}")
    print(f"{f'server-side step, {args.pause:g} s between steps':<62} {summary(paced)}")
    print(
        f"{'  without the figure cache: build one chunk s figures':<62} {summary(built['figures'])}".replace(
            "chunk s", "chunk's"
        )
    )
    print(f"{'  PyVista volume rendering, fresh render window':<62} {summary(built['fresh'])}")
    print(f"{'  PyVista volume rendering, per chunk, all in one window':<62} {summary(built['block'])}")
    if not CHROMIUM.exists():
        print("\nFirst page: skipped, it needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
        return
    starts = [first_page_time() for _ in range(args.starts)]
    print(f"\nFrom `streamlit run app/main.py` (new process, nothing cached) to ({args.starts} start(s)):\n")
    print(f"{'what':<62} {'median':>8} {'max':>8}   (s)")
    for label, values in (
        ("server healthy (/_stcore/health)", [h for h, _ in starts]),
        ("first page drawn in Chromium (counter, 3D scenes; PyVista off)", [d for _, d in starts]),
    ):
        print(f"{label:<62} {statistics.median(values):8.1f} {max(values):8.1f}")
    print("\nTargets: step < 300 ms median with the trace cached; first page < 10 s after the server starts.")
    print_long(args)


if __name__ == "__main__":
    main()
