"""The first visit of each page of the explorer, on a prepared server, in headless Chromium.

One new server, started as ``make run`` starts it (``python -m app``), is left to prepare: the benchmark waits until
its log says ``Pages prepared`` (:data:`app.__main__.PREPARED`, printed once the work done ahead at start is done) and
reports how long that took after the server answered. Then one browser session opens the app (Explore) and goes
to every other page once by its link in the top bar, in the bar's order, on the default checkpoint; then it switches
checkpoint on three pages (to an image model on Images, to a language model on Text, to another occlusion model on
Explore), which is where those pages show more than a note.

A visit is timed from the click (the page's load, for Explore) until the page is drawn: its title (``## Page``), the
last part the page shows (:data:`VISITS`: a page's run is over only once it got there) and, after a switch, the new
checkpoint's name are shown, nothing on the page is stale, the app has stopped running (no status widget, no
spinner), every Plotly figure on the page and in the chunk stepper has drawn (its SVG, and its WebGL canvas for a 3D
one), the stepper shows "Chunk k / K" where the page has one, all of it twice 200 ms apart, and the browser has
painted. Printed: a Markdown table of each visit's seconds over ``--runs`` servers (median and max). Needs
Debian's /usr/bin/chromium.

``--screenshots DIR`` saves each page once drawn, after its visit is timed, as ``DIR/<page>.png`` (after a switch
``DIR/<page>-<checkpoint>.png``): 1600 pixels wide, the viewport made as tall as the page for the shot (between
:data:`SHORTEST` and :data:`TALLEST`), stored as a 256-colour optimised PNG (an octree's palette, which keeps a colour
scale's rare ends). The README's "Every page as it opens" are these; the timings of such a run are not the figures.

    .venv/bin/python benchmarks/first_visit.py
    .venv/bin/python benchmarks/first_visit.py --runs 3
    .venv/bin/python benchmarks/first_visit.py --screenshots docs/img/pages
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app_browser import BUSY, CHROMIUM, COUNTER, painted, start_server  # noqa: E402

from app.__main__ import PREPARED  # noqa: E402

MAIN = '[data-testid="stMain"]'
ALERT = f'{MAIN} [data-testid="stAlert"]'
TABLE = f'{MAIN} [data-testid="stDataFrame"]'
# (link, checkpoint chosen first or None, whether the page shows a chunk stepper there, what the page shows last:
# a selector in the main document, so a visit is not over while the run is still on its way there)
VISITS = (
    ("Explore", None, True, f"{MAIN} h2"),
    ("Occlusion", None, True, f"{MAIN} h5:has-text('Interventions')"),
    ("Diagnose", None, True, f"{MAIN} h5:has-text('Both on this sample')"),
    ("Teach", None, True, f"{MAIN} h3:has-text('Sandbox')"),
    ("Images", None, False, ALERT),
    ("Text", None, False, ALERT),
    ("Audit", None, False, TABLE),
    ("Export", None, True, f"{MAIN} :text('Offline report')"),
    ("Run", None, False, ALERT),
    ("Images", "masked_patches-tensor", True, f"{MAIN} :text('Where each patch was written')"),
    ("Text", "language_modelling-tensor", True, f"{MAIN} h5:has-text('Where the memory reads and writes')"),
    ("Explore", "occlusion-tensor_local_update", True, f"{MAIN} h2"),
)
# In a frame: whether every Plotly figure has drawn (its SVG; a 3D one its WebGL canvas too), and the stepper's counter
DRAWN = """() => [
  [...document.querySelectorAll('.js-plotly-plot')].every(
    (plot) => plot._fullLayout && plot.querySelector('.main-svg') &&
      (!plot._fullLayout._has('gl3d') || plot.querySelector('.gl-container canvas'))),
  (document.getElementById('counter') || {}).textContent || ''
]"""
STALE = '[data-stale="true"]'
VIEWPORT = {"width": 1600, "height": 1800}
SHORTEST, TALLEST = 1200, 6000  # pixels: a screenshot's height at least (the sidebar's) and at most


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1, help="runs, each with a new server (default 1)")
    p.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        metavar="DIR",
        help="run the app of this checkout (default this one), e.g. a git worktree of an earlier commit; its server "
        f"must log {PREPARED!r} when prepared",
    )
    p.add_argument(
        "--patience", type=float, default=180.0, metavar="S", help="seconds to wait for one page (default 180)"
    )
    p.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help="save each page once drawn as DIR/<page>.png (after a switch DIR/<page>-<checkpoint>.png)",
    )
    return p.parse_args()


async def prepared(log: Path, patience: float) -> float:
    """Seconds until the server's log says its preparation is done."""
    start = time.perf_counter()
    while PREPARED not in log.read_text(errors="replace"):
        if time.perf_counter() - start > patience:
            raise SystemExit(f"the server did not print {PREPARED!r} in {patience:g} s; its log: {log}")
        await asyncio.sleep(0.1)
    return time.perf_counter() - start


async def missing(page, title: str, checkpoint: str | None, stepper: bool, last: str) -> str:
    """What the page ``title`` still lacks to be drawn (see the module's docstring), "" once it is drawn."""
    main = page.locator(MAIN)
    if not await main.locator("h2").filter(has_text=title).count():
        return f"no title {title!r}"
    if not await page.locator(last).count():
        return f"nothing at {last}"
    if checkpoint is not None and not await main.get_by_text(checkpoint).count():
        return f"no {checkpoint} on the page"
    if await page.locator(BUSY).count():
        return "the app is running"
    if await page.locator(STALE).count():
        return "stale elements"
    frames = []
    for frame in page.frames:
        try:
            frames.append(await frame.evaluate(DRAWN))
        except Exception:  # noqa: BLE001 (a frame replaced while it was read)
            return "a frame replaced"
    if not all(plots for plots, _ in frames):
        return "a figure not drawn"
    if stepper and not any(COUNTER.search(text) for _, text in frames):
        return "no stepper counter"
    return ""


async def drawn(page, title: str, checkpoint: str | None, stepper: bool, last: str, patience: float) -> None:
    """Until the page ``title`` is drawn, twice 200 ms apart (TimeoutError after ``patience`` s, saying what it
    lacked), and painted."""
    calm, start, lacks = 0, time.perf_counter(), ""
    while calm < 2:
        if time.perf_counter() - start > patience:
            raise TimeoutError(f"{title} not drawn in {patience:g} s: {lacks}")
        await page.wait_for_timeout(200 if calm else 50)
        lacks = await missing(page, title, checkpoint, stepper, last)
        calm = 0 if lacks else calm + 1
    await painted(page)


async def visit(page, url: str, title: str, checkpoint: str | None, stepper: bool, last: str, patience: float) -> float:
    """Seconds for one visit: load the app (the first one), or choose ``checkpoint`` and click the page's link."""
    start = time.perf_counter()
    if page.url == "about:blank":
        await page.goto(url)
    else:
        if checkpoint is not None:
            box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first
            await box.click()
            await page.keyboard.type(checkpoint)
            start = time.perf_counter()
            await page.keyboard.press("Enter")
        else:
            await page.get_by_role("link", name=title).first.click()
    await drawn(page, title, checkpoint, stepper, last, patience)
    return time.perf_counter() - start


async def screenshot(page, folder: Path, title: str, checkpoint: str | None, last: str, patience: float) -> None:
    """Save the drawn page ``title`` whole: the viewport made as tall as the page's main part, drawn again at that
    size, shot, shrunk to 256 colours, and the viewport put back."""
    from PIL import Image

    tall = await page.evaluate(f"() => document.querySelector('{MAIN}').scrollHeight")
    await page.set_viewport_size({**VIEWPORT, "height": min(max(tall, SHORTEST), TALLEST)})
    await drawn(page, title, checkpoint, False, last, patience)
    path = folder / (f"{title.lower()}-{checkpoint}.png" if checkpoint else f"{title.lower()}.png")
    await page.screenshot(path=path)
    await page.set_viewport_size(VIEWPORT)
    with Image.open(path) as image:
        shrunk = image.convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE)
    shrunk.save(path, optimize=True)


async def one_run(patience: float, root: Path, shots: Path | None) -> tuple[float, list[float]]:
    """Seconds from the server answering until it is prepared, and each visit's seconds."""
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        with open(log, "w") as out:
            server, url = start_server("prepared", root=root, log=out)
        try:
            ready = await prepared(log, patience)
            print(f"  prepared {ready:.1f} s after the server answered", file=sys.stderr, flush=True)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
                page = await browser.new_page(viewport=VIEWPORT)
                page.set_default_timeout(patience * 1000)
                seconds = []
                for title, checkpoint, stepper, last in VISITS:
                    if checkpoint is not None:  # the page first, then the switch is timed
                        await page.get_by_role("link", name=title).first.click()
                        await drawn(page, title, None, False, f"{MAIN} h2", patience)
                    seconds.append(await visit(page, url, title, checkpoint, stepper, last, patience))
                    print(f"  {title} {checkpoint or ''}: {seconds[-1]:.1f} s", file=sys.stderr, flush=True)
                    if shots is not None:
                        await screenshot(page, shots, title, checkpoint, last, patience)
                await browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    return ready, seconds


def main() -> None:
    args = parse_args()
    if not CHROMIUM.exists():
        raise SystemExit("needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.runs} run(s), a new server each"
        + (f"; the app of {args.root}" if args.root != ROOT else "")
        + "\n"
    )
    if args.screenshots is not None:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    runs = [asyncio.run(one_run(args.patience, args.root, args.screenshots)) for _ in range(args.runs)]
    print(f"prepared after the server answered (s): {', '.join(f'{ready:.1f}' for ready, _ in runs)}\n")
    print("| page | checkpoint | first visit (s, median / max) |")
    print("|---|---|---|")
    for i, (title, checkpoint, _, _) in enumerate(VISITS):
        times = [seconds[i] for _, seconds in runs]
        shown = f"switched to {checkpoint}" if checkpoint else "default"
        print(f"| {title} | {shown} | {statistics.median(times):.1f} / {max(times):.1f} |")


if __name__ == "__main__":
    main()
