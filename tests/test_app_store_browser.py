"""A long trace STORE (a zarr folder, read a page at a time) in a real browser: `tensor-memory app --trace FOLDER`
opens on its first page, the next page's button and Go to chunk turn pages, and the stepper's counter and figures
follow. A screenshot goes to test-artifacts/."""

from __future__ import annotations

import sys

import pytest
from test_app_browser import ARTIFACTS, browser, chunk, open_app, serve, settle, view  # noqa: F401
from test_app_store import CHUNKS, capture_store


@pytest.fixture(scope="module")
def store_server(tmp_path_factory):
    """``tensor-memory app --trace`` on a 300-chunk store (no gates: quicker pages)."""
    path = capture_store(tmp_path_factory.mktemp("stores") / "long.trace.zarr", gates=False)
    command = [sys.executable, "-m", "tensor_memory_cli", "app", "--trace", str(path)]
    yield from serve(None, "streamlit-store-server.log", command)


def test_a_long_store_turns_pages_in_the_browser(browser, store_server):  # noqa: F811
    page = open_app(browser, store_server)
    assert chunk(page) == (0, CHUNKS - 1)  # a long trace opens on its first chunk
    assert page.get_by_text(f"A long trace: {CHUNKS} chunks.").count() == 1
    assert page.get_by_text(f"A trace store of {CHUNKS} chunks").count() >= 1
    stepper = view(page)
    stepper.get_by_text("chunks 0–63 loaded").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 0").count() == 1
    page.get_by_role("button", name="Chunks 64–127").click()  # the next page's button
    stepper.get_by_text(f"Chunk 64 / {CHUNKS - 1}").wait_for()
    stepper.get_by_text("chunks 64–127 loaded").wait_for()
    settle(page)
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 64").count() == 1
    stepper.get_by_role("button", name="Next", exact=True).click()  # steps within the page, in the browser
    stepper.get_by_text(f"Chunk 65 / {CHUNKS - 1}").wait_for()
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 65").count() == 1
    go = page.get_by_label("Go to chunk")  # a chunk of another page: the server sends that page
    go.fill("290")
    go.press("Enter")
    stepper.get_by_text(f"Chunk 290 / {CHUNKS - 1}").wait_for()
    stepper.get_by_text(f"chunks 256–{CHUNKS - 1} loaded").wait_for()
    settle(page)
    assert stepper.locator(".js-plotly-plot").filter(has_text="after chunk 290").count() == 1
    assert page.get_by_role("button", name="The last chunks").is_disabled()
    page.screenshot(path=str(ARTIFACTS / "app-long-store.png"))
    page.close()
