"""The explorer in a real browser: N sessions open the first page and step S chunks each.

One new server process, started as ``make run`` starts it (``python -m app``: the opening page is
prepared while the server starts) or, with ``--launcher plain``, as plain ``streamlit run
app/main.py`` (nothing done before the first visit), and one headless Chromium with N browser
contexts (separate sessions, as N people). Once the server answers (after ``--open-after`` more
seconds), every session opens the Explore page of the default checkpoint and waits until it is
drawn: the "Chunk k / K" counter and the Plotly 3D scenes, with the app no longer running. Then all
sessions step at once, each S times: Next until the last chunk, then Previous back, and so on. A
step is timed from the click until the new "Chunk k / K" is shown and the app has stopped running
(no status widget, no spinner), and the browser has painted.

Printed: the seconds until the server answers, the first-page time (from opening the page), the
step time p50 and p95 over every step of every session, the mean of each session's last five steps
against its first five, the server's CPU seconds per step while stepping (user + system, from
/proc), the server's peak resident memory (VmHWM), and the session errors: a session that waits
more than ``--patience`` seconds for its first page or for one step stops there, and what its page
shows is printed (the app's status widget, each frame's counter and canvases). ``--view`` chooses
the Plotly 3D view clicked before stepping. ``--trace FILE`` opens the app on a trace file instead (as
``tensor-memory app --trace``: a long one goes to the browser a page of 64 chunks at a time, and stepping turns
back at the page's ends), and ``--page NAME`` steps on another page (e.g. Teach or Text, which draw the chunk
their browser stepper reports on the server: a step there ends when the server has drawn it). ``--turns N`` on a
long trace: after stepping, each session turns to the next page N times (the button above the stepper) and goes to
N chunks of other pages ("Go to chunk", typed): each timed from the click (or Enter) until the stepper shows the new
chunk and the browser has painted. ``--root DIR`` runs the app of another checkout (e.g. a git worktree of an
earlier commit) with this benchmark. Needs Debian's /usr/bin/chromium.

    .venv/bin/python benchmarks/app_browser.py --sessions 1 --steps 20
    .venv/bin/python benchmarks/app_browser.py --sessions 8 --steps 10 --runs 3
    .venv/bin/python benchmarks/app_browser.py --launcher plain --open-after 0
    .venv/bin/python benchmarks/app_browser.py --trace long.trace.safetensors --page Text
    .venv/bin/python benchmarks/app_browser.py --trace long.trace.safetensors --turns 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from analysis.figures.state import VOLUME_KINDS  # noqa: E402
from app.cli import TRACE_ENV  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
COUNTER = re.compile(r"Chunk (\d+) / (\d+)")
BUSY = '[data-testid="stStatusWidget"], [data-testid="stSpinner"]'
TIMEOUT_MS = 600_000


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=1, help="browser sessions stepping at once (default 1)")
    p.add_argument("--steps", type=int, default=20, help="steps per session (default 20)")
    p.add_argument("--runs", type=int, default=1, help="runs, each with a new server (default 1)")
    p.add_argument(
        "--launcher",
        choices=list(LAUNCHERS),
        default="prepared",
        help="how the server starts: as make run does (python -m app, the opening page prepared while the "
        "server starts; default) or plain streamlit run app/main.py",
    )
    p.add_argument(
        "--open-after",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds between the server answering and the sessions opening the page (default 0: at once)",
    )
    p.add_argument(
        "--patience",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a session waits for its first page or for one step before it counts as a session "
        "error, printed with what its page shows (default 300)",
    )
    p.add_argument(
        "--view",
        choices=list(VOLUME_KINDS.values()),
        default=None,
        help="the Plotly 3D view to click before stepping, by its name on the page (default: the page's own)",
    )
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="open the app on this trace file (tensor-memory app --trace FILE) instead of the default checkpoint",
    )
    p.add_argument(
        "--page",
        default=None,
        metavar="NAME",
        help="step on this page, by its link's name (e.g. Text), instead of the page the app opens on",
    )
    p.add_argument(
        "--turns",
        type=int,
        default=0,
        metavar="N",
        help="on a long trace: after stepping, turn to the next page N times and go to N chunks of other pages",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        metavar="DIR",
        help="run the app of this checkout (default this one), e.g. a git worktree of an earlier commit",
    )
    return p.parse_args()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_memory_gb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process, in GB."""
    line = next(row for row in Path(f"/proc/{pid}/status").read_text().splitlines() if row.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024 / 1e9


LAUNCHERS = {"prepared": ["-m", "app"], "plain": ["-m", "streamlit", "run", "app/main.py"]}


def start_server(
    launcher: str = "prepared", trace: Path | None = None, root: Path = ROOT, log=subprocess.DEVNULL
) -> tuple[subprocess.Popen, str]:
    """The server of the checkout ``root`` as ``make run`` starts it (``python -m app``: the opening page prepared
    while it starts), or as plain ``streamlit run app/main.py``, opened on ``trace`` when given, its output to
    ``log`` (a file; default none); returns once it answers its health check."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            *LAUNCHERS[launcher],
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **({TRACE_ENV: str(trace.resolve())} if trace else {})},
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:
                if answer.read().strip() == b"ok":
                    return server, url
        except OSError:
            if server.poll() is not None:
                raise RuntimeError("streamlit did not start") from None
            time.sleep(0.05)


async def settle(page) -> None:
    """Until the app has finished running: no status widget and no spinner, twice 200 ms apart."""
    while True:
        if not await page.locator(BUSY).count():
            await page.wait_for_timeout(200)
            if not await page.locator(BUSY).count():
                return
        await page.wait_for_timeout(50)


def stepper(page):
    """The page's stepper: its component frame, or None before it is there."""
    return next((frame for frame in page.frames if frame is not page.main_frame and "chunk_stepper" in frame.url), None)


async def counter(where) -> tuple[int, int]:
    text = await where.get_by_text(COUNTER).first.inner_text()
    k, last = COUNTER.search(text).groups()
    return int(k), int(last)


async def painted(where) -> None:
    """Until the browser has painted what the last step drew (two animation frames)."""
    await where.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


async def open_first_page(page, url: str, view) -> float:
    """Seconds until the session's first page is drawn (then ``view`` clicked, if one is named)."""
    start = time.perf_counter()
    await page.goto(url)
    where = await stepper_of(page)
    await where.get_by_text(COUNTER).first.wait_for()
    await where.locator(".js-plotly-plot .gl-container canvas").nth(1).wait_for()
    await settle(page)
    await painted(where)
    drawn = time.perf_counter() - start
    if view is not None:
        await page.get_by_role("radio", name=view, exact=True).first.click()  # a segmented control's option
        await settle(page)
        await painted(await stepper_of(page))
    return drawn


async def stepper_of(page):
    """The stepper's frame, once the page shows one."""
    while stepper(page) is None:
        await page.wait_for_timeout(50)
    return stepper(page)


# In the stepper's frame: whether its page asks for reports, and how many render messages the server has sent it
# since counting began (a page drawn on the server sends one with the chunk it drew, once its run gets there).
COUNT_RENDERS = """() => {
  if (window.renders === undefined) {
    window.renders = 0;
    window.addEventListener("message", (event) => {
      if (event.data && event.data.type === "streamlit:render") window.renders += 1;
    });
  }
  return [view.payload.reports, window.renders];
}"""


async def one_step(page, where, direction: int) -> tuple[float, int]:
    """Seconds for one step, Next (``direction`` 1) or Previous (-1), turning back at either end; and the direction."""
    k, last = await counter(where)
    if (
        not 0 <= k + direction <= last
        or await where.get_by_role("button", name="Next" if direction > 0 else "Previous", exact=True).is_disabled()
    ):
        direction = -direction  # an end of the trace, or of the page of a long one
    reports, renders = await where.evaluate(COUNT_RENDERS)
    start = time.perf_counter()
    await where.get_by_role("button", name="Next" if direction > 0 else "Previous", exact=True).click()
    await where.get_by_text(f"Chunk {k + direction} / {last}", exact=True).wait_for()
    if reports:  # the page draws the chunk on the server: until its run has reached the stepper, and ended
        await where.wait_for_function("seen => window.renders > seen", arg=renders)
        await settle(page)
    await painted(where)
    return time.perf_counter() - start, direction


async def step(page, steps: int, patience: float) -> tuple[list[float], str]:
    """Seconds per step (Next to the last chunk, then Previous back, and so on), and why the session stopped early
    if a step took longer than ``patience`` ("" if it did not)."""
    times, direction, where = [], 1, stepper(page)
    for s in range(steps):
        try:
            seconds, direction = await asyncio.wait_for(one_step(page, where, direction), patience)
        except TimeoutError:
            return times, f"step {s + 1} not done in {patience:g} s; {await what_it_shows(page)}"
        times.append(seconds)
    return times, ""


SHOWN = "() => [(document.getElementById('counter') || {}).textContent || '', view.payload.offset, view.payload.count]"
PAGE_BUTTON = re.compile(r"Chunks (\d+)–(\d+)")


async def showing(page, chunk: int):
    """Until the page's stepper (its frame may be a new one) shows ``chunk``; returns its frame."""
    while True:
        where = stepper(page)
        try:
            text = (await where.evaluate(SHOWN))[0] if where is not None else ""
        except Exception:  # noqa: BLE001 (a frame replaced while it was read)
            text = ""
        found = COUNTER.search(text)
        if found and int(found.group(1)) == chunk:
            return where
        await page.wait_for_timeout(20)


async def one_turn(page, jump: bool, rng: random.Random) -> float:
    """Seconds for one move of the server's on a long trace: to the next page (the previous one from the last), or
    (``jump``) to a chunk of another page typed into "Go to chunk"; until the stepper shows it, painted."""
    text, offset, count = await stepper(page).evaluate(SHOWN)
    total = int(COUNTER.search(text).group(2)) + 1
    if jump:
        chunk = rng.choice([k for k in range(total) if not offset <= k < offset + count])
        field = page.get_by_label("Go to chunk")
        await field.fill(str(chunk))
        start = time.perf_counter()
        await field.press("Enter")
    else:
        buttons = [b for b in await page.get_by_role("button", name=PAGE_BUTTON).all() if await b.is_enabled()]
        spans = [(b, [int(v) for v in PAGE_BUTTON.search(await b.inner_text()).groups()]) for b in buttons]
        later = [(b, first) for b, (first, _) in spans if first > offset]  # its first chunk is shown
        button, chunk = later[0] if later else (spans[0][0], spans[0][1][1])  # the previous page's last
        start = time.perf_counter()
        await button.click()
    await painted(await showing(page, chunk))
    seconds = time.perf_counter() - start
    await settle(page)  # the run that moved it ends before the next move
    return seconds


async def turn(page, turns: int, seed: int) -> list[float]:
    """Seconds per page turn (``turns`` of them), then per go-to-chunk (as many): one list of each, in order."""
    rng = random.Random(seed)
    return [await one_turn(page, False, rng) for _ in range(turns)] + [
        await one_turn(page, True, rng) for _ in range(turns)
    ]


def percentiles(times: list[float]) -> tuple[float, float]:
    """(p50, p95) of ``times``, nan for none."""
    every = sorted(times) or [float("nan")]
    return statistics.median(every), every[min(len(every) - 1, int(round(0.95 * (len(every) - 1))))]


async def open_session(browser, url: str, args: argparse.Namespace) -> tuple[object, float, str]:
    """A new session (a browser context) and the seconds until its first page is drawn; or why it was not drawn
    within ``--patience``."""
    context = await browser.new_context(viewport={"width": 1600, "height": 1800})
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        return page, await asyncio.wait_for(open_first_page(page, url, args.view), args.patience), ""
    except TimeoutError:
        return page, float("nan"), f"first page not drawn in {args.patience:g} s; {await what_it_shows(page)}"


async def go_to_page(page, name: str) -> None:
    """Open the page linked as ``name`` and wait until its stepper is drawn."""
    await page.get_by_role("link", name=name).click()
    await page.wait_for_timeout(500)
    await settle(page)
    await (await stepper_of(page)).get_by_text(COUNTER).first.wait_for()


async def what_it_shows(page) -> str:
    """What a stalled session's page shows: the app's status widget, and each frame's counter and Plotly canvases."""
    status = page.locator(BUSY)
    shown = [
        f"status widget {(await status.first.inner_text()).strip()!r}" if await status.count() else "no status widget"
    ]
    text = (
        " ".join((await page.locator("section.main, [data-testid='stMain']").first.inner_text()).split())
        if await page.locator("section.main, [data-testid='stMain']").count()
        else "(no main section)"
    )
    shown.append(f"the page reads {text[:300]!r}")
    for frame in page.frames:
        try:
            seen = await frame.evaluate(
                "() => [(document.getElementById('counter') || {}).textContent || null, "
                "document.querySelectorAll('.js-plotly-plot canvas').length]"
            )
        except Exception as error:  # noqa: BLE001 (a frame detached while it was read)
            seen = f"unreadable ({type(error).__name__})"
        shown.append(f"frame {frame.url.rsplit('/', 1)[-1][:40] or '(page)'}: counter, canvases {seen}")
    return "; ".join(shown)


async def one_run(args: argparse.Namespace) -> dict[str, object]:
    from playwright.async_api import async_playwright

    sessions, steps = args.sessions, args.steps
    launched = time.perf_counter()
    server, url = start_server(args.launcher, args.trace, args.root)
    up = time.perf_counter() - launched
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            await asyncio.sleep(args.open_after)
            opened = await asyncio.gather(*(open_session(browser, url, args) for _ in range(sessions)))
            if args.page:
                await asyncio.gather(*(go_to_page(page, args.page) for page, _, error in opened if not error))
            cpu_before = cpu_seconds(server.pid)
            stepped = await asyncio.gather(
                *(step(page, steps, args.patience) for page, _, error in opened if not error)
            )
            cpu = cpu_seconds(server.pid) - cpu_before
            turned = await asyncio.gather(
                *(turn(page, args.turns, seed) for seed, (page, _, error) in enumerate(opened) if not error)
            )
            memory = peak_memory_gb(server.pid)
            await browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    errors = [error for _, _, error in opened if error] + [error for _, error in stepped if error]
    p50, p95 = percentiles([t for times, _ in stepped for t in times])
    return {
        "up": up,
        "first": [d for _, d, error in opened if not error] or [float("nan")],
        "errors": errors,
        "p50": p50,
        "p95": p95,
        "turns": percentiles([t for times in turned for t in times[: args.turns]]),
        "jumps": percentiles([t for times in turned for t in times[args.turns :]]),
        "first5": statistics.mean([statistics.mean(t[:5]) for t, _ in stepped if t] or [float("nan")]),
        "last5": statistics.mean([statistics.mean(t[-5:]) for t, _ in stepped if t] or [float("nan")]),
        "cpu_per_step": cpu / max(1, sum(len(t) for t, _ in stepped)),
        "memory_gb": memory,
    }


def main() -> None:
    args = parse_args()
    if not CHROMIUM.exists():
        raise SystemExit("needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.sessions} session(s) × "
        f"{args.steps} steps, view {args.view or 'as the page opens'}, server {args.launcher}, pages opened "
        f"{args.open_after:g} s after it answers"
        + (f"; trace {args.trace}" if args.trace else "")
        + (f"; stepping on {args.page}" if args.page else "")
        + (f"; {args.turns} page turns and {args.turns} go-to-chunks a session" if args.turns else "")
        + (f"; the app of {args.root}" if args.root != ROOT else "")
        + "\n"
    )
    print(
        "| run | server answers (s) | first page (s, median / max) | step p50 (s) | step p95 (s) "
        "| first five / last five (s) | server CPU a step (s) | server peak memory (GB) | session errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        r = asyncio.run(one_run(args))
        print(
            f"| {run} | {r['up']:.1f} | {statistics.median(r['first']):.1f} / {max(r['first']):.1f} | "
            f"{r['p50']:.2f} | {r['p95']:.2f} | {r['first5']:.2f} / {r['last5']:.2f} | {r['cpu_per_step']:.3f} | "
            f"{r['memory_gb']:.2f} | {len(r['errors'])} |",
            flush=True,
        )
        if args.turns:
            print("  next page p50 / p95 (s): {:.2f} / {:.2f}".format(*r["turns"]), flush=True)
            print("  go to chunk p50 / p95 (s): {:.2f} / {:.2f}".format(*r["jumps"]), flush=True)
        for error in r["errors"]:
            print(f"  run {run}, a session: {error}", flush=True)


if __name__ == "__main__":
    main()
