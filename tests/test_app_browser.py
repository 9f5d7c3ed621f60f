"""The app in a real browser: ``streamlit run`` on a free port, opened in headless Debian Chromium.

Checks that the first page settles with its 3D views drawn, that "Next" advances "Chunk k / K",
that Play steps on its own until paused, that a broken upload shows an error, that a second
browser session keeps its own chunk, that the other pages draw without an exception, that the
pages drawn on the server (Teach, Export, Text) follow the chunk their browser stepper shows and
that every page opens on the chunk the last one was left at, and that the image view (masked
patches) and the video view (moving digits) draw their pictures.
Screenshots go to test-artifacts/ (git-ignored) for people to look at.
"""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from app_helpers import minilm_trace

from app.cli import TRACE_ENV

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        "browser tests need Debian's chromium at /usr/bin/chromium; install it with "
        "`sudo apt-get install -y chromium` (make test does when run as root)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need Playwright for Python")

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
TIMEOUT_MS = 180_000  # a loaded 2-core machine takes a while for the first page
COUNTER = re.compile(r"Chunk (\d+) / (\d+)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """A ``streamlit run app/main.py`` of this checkout; its URL. Stopped (only this process) at the end."""
    yield from serve()


@pytest.fixture(scope="module")
def trace_server(tmp_path_factory):
    """The app opened on a trace of a Hugging Face model (``tensor-memory app --trace``): real MiniLM with the
    shipped memory after its last layer."""
    path = minilm_trace(tmp_path_factory.mktemp("traces") / "minilm.trace.safetensors")
    yield from serve({TRACE_ENV: str(path)}, "streamlit-trace-server.log")


def serve(
    env: dict | None = None,
    log_name: str = "streamlit-server.log",
    command: list[str] | None = None,
    port_flag: str = "--port",
    cwd: Path = ROOT,
):
    """Run the app on a free port until the generator is closed (``streamlit run app/main.py``, or ``command`` and
    ``port_flag PORT``, started in ``cwd``); yields its URL on 127.0.0.1."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")
    command = (
        [*command, port_flag, str(port)]
        if command
        else [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app/main.py",
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ]
    )
    process = subprocess.Popen(
        command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                    if answer.read().strip() == b"ok":
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start (exit code {process.poll()})") from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def settle(page, timeout_s: float = 180) -> None:
    """Wait until the script has finished running and no spinner is left."""
    deadline = time.monotonic() + timeout_s
    page.wait_for_timeout(500)
    while time.monotonic() < deadline:
        busy = page.locator('[data-testid="stStatusWidget"], [data-testid="stSpinner"]').count()
        if not busy:
            page.wait_for_timeout(800)
            if not page.locator('[data-testid="stStatusWidget"], [data-testid="stSpinner"]').count():
                return
        page.wait_for_timeout(300)
    raise AssertionError("the app did not settle")


def view(page):
    """The page's browser stepper (its component frame), where it steps and draws the chunk views it holds."""
    return page.frame_locator('iframe[title*="chunk_stepper"]')


def chunk(page) -> tuple[int, int]:
    text = view(page).get_by_text(COUNTER).first.inner_text()
    k, last = COUNTER.search(text).groups()
    return int(k), int(last)


def drawn(locator) -> float:
    """The spread of an element's pixels: near 0 for a blank box."""
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(locator.screenshot())).convert("L"), dtype=np.float32)
    return float(image.std())


def open_app(browser, server):
    page = browser.new_page(viewport={"width": 1600, "height": 1800})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server)
    view(page).get_by_text(COUNTER).first.wait_for()
    settle(page)
    return page


def test_first_page_draws_the_memory_and_next_advances(browser, server):
    page = open_app(browser, server)
    page.screenshot(path=str(ARTIFACTS / "app-explore.png"))
    k, last = chunk(page)
    assert 0 <= k <= last
    stepper = view(page)
    # the 3D views: Plotly's WebGL scenes (the point cloud and the trajectories); PyVista waits until asked for
    assert stepper.locator(".js-plotly-plot .gl-container canvas").count() >= 2
    volume = stepper.locator(".js-plotly-plot").filter(has_text="after chunk").first
    assert drawn(volume) > 10 and stepper.locator("img").count() == 0
    page.get_by_text("PyVista", exact=True).click()  # the toggle: every chunk rendered once, sent to the browser
    rendering = stepper.locator("img").first
    rendering.wait_for()
    settle(page)
    assert rendering.evaluate("img => img.complete && img.naturalWidth > 0") and drawn(rendering) > 10
    assert chunk(page) == (k, last)  # new views, the same chunk
    before = rendering.get_attribute("src")
    if k == last:
        stepper.get_by_role("button", name="Previous", exact=True).click()
        k -= 1
    stepper.get_by_role("button", name="Next", exact=True).click()
    stepper.get_by_text(f"Chunk {k + 1} / {last}").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text=f"after chunk {k + 1}").count() == 1  # views follow
    assert rendering.get_attribute("src") != before  # and so does PyVista's image
    page.screenshot(path=str(ARTIFACTS / "app-explore-next.png"))
    page.close()


def test_stepping_happens_in_the_browser_with_no_message_to_the_server(browser, server):
    """Next, Previous, the slider and the arrow keys move every view; the app's websocket carries nothing
    from the browser while ten chunks go by."""
    page = browser.new_page(viewport={"width": 1600, "height": 1800})
    page.set_default_timeout(TIMEOUT_MS)
    sent: list[object] = []
    page.on("websocket", lambda socket: socket.on("framesent", lambda frame: sent.append(frame)))
    page.goto(server)
    view(page).get_by_text(COUNTER).first.wait_for()
    settle(page)
    page.wait_for_timeout(1000)
    before, stepper = len(sent), view(page)
    stepper.get_by_role("slider", name="Chunk").fill("0")
    stepper.get_by_text("Chunk 0 / 11").wait_for()
    for k in range(1, 6):
        stepper.get_by_role("button", name="Next", exact=True).click()
        stepper.get_by_text(f"Chunk {k} / 11").wait_for()
        assert stepper.locator(".js-plotly-plot").filter(has_text=f"chunks 0–{k}").count() == 1
    stepper.get_by_role("button", name="Previous", exact=True).click()
    stepper.get_by_text("Chunk 4 / 11").wait_for()
    for k in (5, 6, 7):
        stepper.get_by_role("button", name="Next", exact=True).press("ArrowRight")  # the keyboard steps too
        stepper.get_by_text(f"Chunk {k} / 11").wait_for()
    stepper.get_by_role("button", name="Next", exact=True).press("ArrowLeft")
    stepper.get_by_text("Chunk 6 / 11").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 6").count() == 1
    page.wait_for_timeout(1000)
    assert len(sent) == before, f"{len(sent) - before} messages went to the server while stepping"
    page.close()


def test_play_steps_on_its_own_and_pause_stops(browser, server):
    page = open_app(browser, server)
    stepper = view(page)
    stepper.get_by_role("slider", name="Chunk").fill("2")
    stepper.get_by_text("Chunk 2 / 11").wait_for()
    stepper.get_by_role("button", name="Play", exact=True).click()
    stepper.get_by_text("Chunk 4 / 11").wait_for(timeout=60_000)  # two steps, nobody clicking
    page.screenshot(path=str(ARTIFACTS / "app-explore-playing.png"))
    stepper.get_by_role("button", name="Pause", exact=True).click()
    stopped = chunk(page)
    page.wait_for_timeout(2500)  # playing, it would have moved twice
    assert chunk(page) == stopped and stepper.get_by_role("button", name="Play", exact=True).count() == 1
    page.screenshot(path=str(ARTIFACTS / "app-explore-paused.png"))
    page.close()


def test_broken_upload_shows_an_error_and_the_app_goes_on(browser, server):
    page = open_app(browser, server)
    before = chunk(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(  # the checkpoint box
        files=[{"name": "broken.zip", "mimeType": "application/zip", "buffer": b"PK\x03\x04 not really a zip"}]
    )
    page.get_by_text("Could not use broken.zip").wait_for()
    settle(page)
    assert "not a zip archive" in page.locator('[data-testid="stAlertContentError"]').first.inner_text()
    assert chunk(page) == before
    page.screenshot(path=str(ARTIFACTS / "app-upload-error.png"))
    page.close()


def test_two_sessions_keep_their_own_chunk(browser, server):
    first, second = open_app(browser, server), open_app(browser, server)
    k, last = chunk(second)
    view(first).get_by_role("button", name="Previous" if k == last else "Next", exact=True).click()
    second.get_by_role("radio", name="isosurfaces", exact=True).click()  # the second session runs again, alone
    settle(second)
    assert chunk(second) == (k, last) and chunk(first) != (k, last)
    first.close()
    second.close()


def test_other_pages_render(browser, server):
    page = open_app(browser, server)
    for name in ("Occlusion", "Teach", "Diagnose"):
        visit(page, name)
        page.screenshot(path=str(ARTIFACTS / f"app-{name.lower()}.png"))
    page.close()


def test_teach_runs_the_mechanism_on_the_chunk_the_browser_shows(browser, server):
    """Teach draws a chunk on the server: its stepper tells the server the chunk it shows, and the page follows."""
    page = open_app(browser, server)
    visit(page, "Teach")
    stepper = view(page)
    k, last = chunk(page)
    page.get_by_text(f"Chunk {k} holds tokens").wait_for()
    to = k - 1 if k == last else k + 1
    stepper.get_by_role("button", name="Previous" if to < k else "Next", exact=True).click()
    stepper.get_by_text(f"Chunk {to} / {last}").wait_for()
    page.get_by_text(f"Chunk {to} holds tokens").wait_for()  # the walkthrough of the new chunk, from the server
    settle(page)
    assert page.get_by_role("button", name=f"Take chunk {to}'s addressing").count() == 1
    stepper.get_by_role("button", name="Next", exact=True).press("ArrowLeft")  # the keyboard too
    page.get_by_text(f"Chunk {to - 1} holds tokens").wait_for()
    settle(page)
    page.screenshot(path=str(ARTIFACTS / "app-teach-stepped.png"))
    page.close()


def test_every_page_opens_on_the_chunk_the_last_one_was_left_at(browser, server):
    """Explore steps with no message to the server; Export, opened next, starts where Explore was left and exports
    that chunk; Explore, opened again, starts where Export was left."""
    page = open_app(browser, server)
    stepper = view(page)
    stepper.get_by_role("slider", name="Chunk").fill("2")
    stepper.get_by_text("Chunk 2 / 11").wait_for()
    visit(page, "Export")
    view(page).get_by_text("Chunk 2 / 11").wait_for()
    page.get_by_text("Figures of chunk 2").wait_for()  # the server follows the browser's chunk
    view(page).get_by_role("button", name="Next", exact=True).click()
    page.get_by_text("Figures of chunk 3").wait_for()
    settle(page)
    visit(page, "Explore")
    view(page).get_by_text("Chunk 3 / 11").wait_for()
    assert view(page).locator(".js-plotly-plot").filter(has_text="after chunk 3").count() == 1
    page.close()


def test_diagnose_steps_both_checkpoints_together_in_the_browser(browser, server):
    page = open_app(browser, server)
    visit(page, "Diagnose")
    stepper = view(page)  # occlusion-tensor beside occlusion-base, on the session's sample
    stepper.get_by_text("occlusion-base", exact=True).wait_for()
    settle(page)
    k, last = chunk(page)
    to = k - 1 if k == last else k + 1
    stepper.get_by_role("button", name="Previous" if to < k else "Next", exact=True).click()
    stepper.get_by_text(f"Chunk {to} / {last}").wait_for()
    volume = stepper.locator(".js-plotly-plot").filter(has_text=f"after chunk {to}")
    assert volume.count() == 1 and drawn(volume.first) > 10  # the tensor side's memory follows
    frames = stepper.locator(".js-plotly-plot").filter(has_text=f"frame {to}")
    assert frames.count() == 2  # both sides show the new frame with their own prediction
    page.screenshot(path=str(ARTIFACTS / "app-compare.png"), full_page=True)
    page.close()


def choose_checkpoint(page, name: str) -> None:
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first
    box.click()
    page.keyboard.type(name)
    page.keyboard.press("Enter")
    settle(page)


def visit(page, link: str, checkpoint: str = "") -> None:
    """Open the page ``link`` (on ``checkpoint`` when given) and require that it ran without an exception."""
    if checkpoint:
        choose_checkpoint(page, checkpoint)
    page.get_by_role("link", name=link).first.click()
    settle(page)
    assert not page.locator('[data-testid="stException"]').count(), link


def test_text_and_audit_pages_of_the_language_model(browser, server):
    page = open_app(browser, server)
    visit(page, "Text", "language_modelling-tensor")
    page.get_by_text("Chunk 7: tokens 112–127").first.wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()  # elements arrive one by one: wait, not count
    losses = page.locator(".js-plotly-plot").filter(has_text="loss of each next token").first
    losses.wait_for()
    settle(page)
    assert drawn(losses) > 10
    page.screenshot(path=str(ARTIFACTS / "app-text.png"), full_page=True)
    view(page).get_by_role("button", name="Previous", exact=True).click()  # the browser's stepper, followed
    page.get_by_text("Chunk 6: tokens 96–111").first.wait_for()
    settle(page)
    visit(page, "Audit")
    page.get_by_text("causal").first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "app-audit.png"), full_page=True)
    page.close()


def test_image_and_video_views(browser, server):
    page = open_app(browser, server)
    visit(page, "Images", "masked_patches-tensor")
    panels = page.locator(".js-plotly-plot").filter(has_text="of the patches hidden").first
    panels.wait_for()
    overlay = page.locator(".js-plotly-plot").filter(has_text="‖h‖").first
    overlay.wait_for()
    settle(page)
    assert drawn(panels) > 10 and drawn(overlay) > 10
    page.screenshot(path=str(ARTIFACTS / "app-images.png"), full_page=True)
    visit(page, "Occlusion", "moving_digits-tensor")
    stepper = view(page)  # the clip, the belief and the energy step in the browser
    strip = stepper.locator(".js-plotly-plot").filter(has_text="true → predicted digit").first
    strip.wait_for()
    settle(page)
    assert drawn(strip) > 10
    page.screenshot(path=str(ARTIFACTS / "app-video.png"), full_page=True)
    k, last = chunk(page)
    to = k - 1 if k == last else k + 1
    stepper.get_by_role("button", name="Previous" if to < k else "Next", exact=True).click()
    stepper.get_by_text(f"Chunk {to} / {last}").wait_for()
    stepper.get_by_text(f"at frame {to}:").wait_for()  # the belief's numbers follow
    assert stepper.locator(".js-plotly-plot").filter(has_text="memory energy").count() == 1
    page.close()


def test_explore_on_a_traced_hugging_face_model(browser, trace_server):
    page = open_app(browser, trace_server)
    assert page.get_by_text("model: BertModel").count() == 1
    stepper = view(page)
    tokens = stepper.locator(".js-plotly-plot").filter(has_text="its tokens").first
    assert tokens.count() == 1 and drawn(tokens) > 10
    volume = stepper.locator(".js-plotly-plot").filter(has_text="after chunk").first
    assert drawn(volume) > 10
    page.screenshot(path=str(ARTIFACTS / "app-own-model.png"))
    stepper.get_by_role("button", name="Previous", exact=True).click()
    stepper.get_by_text("Chunk 2 / 3").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 2").count() == 1
    page.get_by_role("link", name="Diagnose").click()
    page.get_by_text("Addressing report", exact=True).wait_for()  # the header's blurb says it too
    page.get_by_text("the one sample this trace recorded").wait_for()  # the caption: drawn after the heading
    settle(page)
    page.close()


@pytest.fixture(scope="module")
def long_trace_server(tmp_path_factory):
    """The app opened on a 150-chunk trace (occlusion-tensor on 150 frames): it goes to the browser 64 chunks a page."""
    from analysis import capture

    path = capture(ROOT / "checkpoints" / "occlusion-tensor", seed=2, frames=150, progress=False).save(
        tmp_path_factory.mktemp("traces") / "long.trace.safetensors"
    )
    yield from serve({TRACE_ENV: str(path)}, "streamlit-long-trace-server.log")


def test_a_long_trace_steps_in_the_browser_within_its_page_and_the_server_turns_pages(browser, long_trace_server):
    page = open_app(browser, long_trace_server)
    k, last = chunk(page)
    first = k // 64 * 64
    assert last == 149 and page.get_by_text("A long trace: 150 chunks.").count() == 1
    stepper = view(page)
    stepper.get_by_text(f"chunks {first}–{first + 63} loaded").wait_for()
    stepper.get_by_role("slider", name="Chunk").fill(str(first + 62))
    stepper.get_by_text(f"Chunk {first + 62} / 149").wait_for()
    stepper.get_by_role("button", name="Next", exact=True).click()
    stepper.get_by_text(f"Chunk {first + 63} / 149").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text=f"after chunk {first + 63}").count() == 1
    assert stepper.get_by_role("button", name="Next", exact=True).is_disabled()  # the page's end: the server turns it
    page.get_by_role("button", name=f"Chunks {first + 64}–").click()
    stepper.get_by_text(f"Chunk {first + 64} / 149").wait_for()
    settle(page)
    assert stepper.locator(".js-plotly-plot").filter(has_text=f"after chunk {first + 64}").count() == 1
    assert stepper.get_by_role("button", name="Previous", exact=True).is_disabled()
    go = page.get_by_label("Go to chunk")  # a chunk of the page the browser holds: no new views, the stepper moves
    go.fill(str(first + 70))
    go.press("Enter")
    stepper.get_by_text(f"Chunk {first + 70} / 149").wait_for()
    settle(page)
    page.screenshot(path=str(ARTIFACTS / "app-long-trace.png"))
    page.close()


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port``, read from the kernel's own tables
    (``/proc/net/tcp`` and ``tcp6``): where a server answers, found without sending it any traffic."""
    addresses = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: TCP_LISTEN
                continue
            # The kernel prints each 32-bit word of the address in host byte order.
            packed = b"".join(int(address[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(address), 8))
            addresses.add(socket.inet_ntop(family, packed))
    return addresses


def test_tensor_memory_app_answers_on_this_machine_only_unless_told(browser):
    """``tensor-memory app`` listens on 127.0.0.1 only (the page opens there, and the kernel lists no other
    listening address for its port); ``--host 0.0.0.0`` listens on every address and says in one line who can
    then use the machine. Only loopback is ever connected to."""
    if not Path("/proc/net/tcp").exists():
        pytest.skip("this machine has no /proc/net/tcp to read listening sockets from")
    cli = [sys.executable, "-m", "tensor_memory_cli", "app"]
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    for log_name, flags, expected in (
        ("streamlit-local.log", [], {"127.0.0.1"}),
        ("streamlit-network.log", ["--host", "0.0.0.0"], {"0.0.0.0"}),
    ):
        served = serve(None, log_name, [*cli, *flags])
        url = next(served)
        try:
            assert page.goto(url).ok
            assert listening_addresses(int(url.rsplit(":", 1)[1])) == expected
        finally:
            served.close()
    said = (ARTIFACTS / "streamlit-network.log").read_text()
    assert "anyone who can reach this port can upload checkpoints and run them on this machine" in said
    assert "anyone who can reach" not in (ARTIFACTS / "streamlit-local.log").read_text()
    page.close()
