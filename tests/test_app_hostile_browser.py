"""File content is text, never markup: the app in a real browser on a trace and a run whose every string is hostile
(``hostile_content``: Markdown images and links, backticks, maths, coloured text, icons, HTML and SVG links,
``javascript:`` and ``data:`` URLs, Plotly's ``%{…}``, multi-line and 500-character strings), opened from a file whose
name is hostile too, and a hostile-named upload. On every page, in every frame, nothing is made from that content:

- no element has a marker in a URL-bearing attribute (``href``, ``src``, ``xlink:href``, ``style``'s ``url()``, …);
- no element's own text holds a marker without the atom's markup verbatim beside it (its witness): a ``<strong>``,
  ``<a>``, ``<code>``, heading, list item, KaTeX annotation or coloured span made from an atom holds the marker
  alone;
- no Plotly figure holds a string that Plotly renders as markup (a raw ``<a``/``<b>``/``<img`` atom, in a string
  shown or in the ``customdata`` its hover template shows) or a hostile ``%{…}`` in a template (hover labels are
  drawn from these only when hovered);
- every request of every frame went to the app's own 127.0.0.1 port (and nothing loads from elsewhere: a favicon or
  font link off-host counts too).

The checks are tried first on a page made to fail them. Screenshots go to test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from hostile_content import MARKER, WITNESSES, file_name, hostile, hostile_run, hostile_trace
from test_app_browser import ARTIFACTS, COUNTER, TIMEOUT_MS, browser, serve, settle, view  # noqa: F401 - a fixture

from app.cli import RUN_ENV, TRACE_ENV

PAGES = ("explore", "diagnose", "text", "export", "run", "occlusion", "teach", "images", "audit")
URL_ATTRIBUTES = ("href", "src", "srcset", "xlink:href", "action", "formaction", "poster", "data", "background")
LOADS = "link[href], script[src], img[src], iframe[src], source[src], video[src], audio[src], object[data], embed[src]"

FIND = """([pattern, witnesses, urlAttributes, loads]) => {
  const marker = new RegExp(pattern, 'g'), found = [], plain = s => s.replace(/[\\u200b\\u2060\\ufeff]/g, '');
  const at = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const name = a.name.toLowerCase();
      const risky = urlAttributes.includes(name) || name.endsWith(':href') || name.startsWith('on') ||
        name === 'style' && /url\\(/i.test(a.value) || name === 'srcdoc';
      if (risky) for (const m of new Set(a.value.match(marker) || []))
        found.push({what: `attribute ${name}`, element: at(el), marker: m, text: a.value.slice(0, 160)});
    }
    let own = '';
    for (const node of el.childNodes) if (node.nodeType === Node.TEXT_NODE) own += node.data;
    own = plain(own);
    for (const m of new Set(own.match(marker) || []))
      if (witnesses[m] === undefined || !own.includes(witnesses[m]))
        found.push({what: 'markup', element: at(el), marker: m, text: own.slice(0, 160)});
  }
  for (const el of document.querySelectorAll(loads)) {
    const url = el.getAttribute('href') || el.getAttribute('src') || el.getAttribute('data');
    const resolved = new URL(url, document.baseURI);
    if (/^(https?|wss?|ftp):$/.test(resolved.protocol) && resolved.host !== window.top.location.host)
      found.push({what: 'loads from off-host', element: at(el), marker: (url.match(marker) || [''])[0],
                  text: url.slice(0, 160)});
  }
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const raw = Object.entries(witnesses).filter(([, w]) => w.includes('<'));
    const look = (value, path, shown, template) => {
      if (typeof value === 'string') {
        if (!shown) return;
        for (const [m, w] of raw) if (value.includes(w))
          found.push({what: `plotly ${path} (rendered by Plotly)`, element: at(gd), marker: m,
                      text: value.slice(0, 160)});
        if (template) for (const m of new Set(value.match(marker) || []))
          if (value.includes(m + '%{')) found.push({what: `plotly ${path} (a template)`, element: at(gd), marker: m,
                                                   text: value.slice(0, 160)});
      } else if (Array.isArray(value)) value.forEach((v, i) => look(v, `${path}[${i}]`, shown, template));
      else if (value && typeof value === 'object' && !ArrayBuffer.isView(value))
        for (const [k, v] of Object.entries(value)) look(v, `${path}.${k}`, shown, template || /template$/.test(k));
    };
    for (const [i, trace] of (gd.data || []).entries()) {
      const templates = JSON.stringify([trace.hovertemplate, trace.texttemplate]);
      for (const [k, v] of Object.entries(trace))
        look(v, `data[${i}].${k}`, k !== 'customdata' || templates.includes('customdata'), /template$/.test(k));
    }
    look(gd.layout || {}, 'layout', true, false);
  }
  return found;
}"""


def findings(page) -> list[dict]:
    """What every frame of ``page`` holds that hostile content made (see the module docstring), each with its frame."""
    out = []
    for frame in page.frames:
        for found in frame.evaluate(FIND, [MARKER.pattern, WITNESSES, list(URL_ATTRIBUTES), LOADS]):
            out.append({"frame": frame.name or frame.url[:80], **found})
    return out


class Requests:
    """Every request of a browser context (every page, every frame) and every websocket its pages open."""

    def __init__(self, context) -> None:
        self.urls: list[str] = []
        context.on("request", lambda request: self.urls.append(request.url))

    def watch(self, page) -> None:
        page.on("websocket", lambda socket: self.urls.append(socket.url))

    def off_host(self, server: str) -> list[str]:
        """The URLs not on ``server`` (its http and ws addresses); data: and blob: ones only when hostile made them."""
        own = (server + "/", server.replace("http://", "ws://", 1) + "/")
        return [
            url
            for url in self.urls
            if not (url.startswith(own) or url == server)
            and (not url.startswith(("data:", "blob:", "about:")) or MARKER.search(url))
        ]


def said(found: list[dict]) -> str:
    return "\n".join(f"{f['frame']}: {f['what']} <{f['element']}> from {f['marker']!r}: {f['text']!r}" for f in found)


def test_the_checks_find_rendered_markup_in_every_frame_and_requests_off_host(browser, tmp_path):  # noqa: F811
    """A page made to fail: an atom rendered (an image that is fetched, a bold, a link in a frame, a Plotly-like
    figure's raw link) is found; the same atoms as text are not."""
    bold, image, link, html = (hostile("X", (k,)) for k in (2, 0, 1, 8))
    text = f"<p>{bold.replace('<', '&lt;')} and {html.replace('<', '&lt;')}</p>"  # shown as text: nothing found
    rendered = '<strong>hzXa02</strong><img src="http://127.0.0.1:9/img-hzXa00.png">'
    framed = '<a href="http://example.invalid/hzXa01">hzXa01</a>'
    (tmp_path / "index.html").write_text(
        f"<html><body>{text}{rendered}<iframe srcdoc='{framed}'></iframe>"
        f"<div class='js-plotly-plot' id='plot'></div><script>document.getElementById('plot').data = "
        f"[{{type: 'bar', name: {html!r}, customdata: [{html!r}], hovertemplate: 'x'}}];</script></body></html>"
    )
    assert image and link
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        context = browser.new_context()
        requests = Requests(context)
        page = context.new_page()
        page.goto(url + "/index.html", wait_until="load")
        found = findings(page)
        server.shutdown()
    kinds = {(f["what"], f["marker"]) for f in found}
    assert kinds == {
        ("markup", "hzXa02"),
        ("attribute src", "hzXa00"),
        ("loads from off-host", "hzXa00"),
        ("attribute srcdoc", "hzXa01"),
        ("attribute href", "hzXa01"),  # in the frame
        ("markup", "hzXa01"),
        ("plotly data[0].name (rendered by Plotly)", "hzXa08"),
    }, said(found)
    assert requests.off_host(url) == ["http://127.0.0.1:9/img-hzXa00.png"]
    context.close()


@pytest.fixture(scope="module")
def hostile_trace_file(tmp_path_factory) -> Path:
    return hostile_trace(tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def hostile_server(hostile_trace_file, tmp_path_factory):
    """The app opened on the hostile trace (its file named with atoms) and following the hostile run."""
    run = hostile_run(tmp_path_factory.mktemp("runs") / "run", hostile_trace_file)
    yield from serve({TRACE_ENV: str(hostile_trace_file), RUN_ENV: str(run)}, "streamlit-hostile-server.log")


def open_page(context, requests: Requests, url: str):
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    requests.watch(page)
    page.goto(url)
    page.locator('[data-testid="stSidebar"]').wait_for()
    settle(page)
    return page


def settled_frames(page) -> None:
    """Wait for the chunk stepper (where the page has one) to draw, and for the page to settle."""
    if page.locator('iframe[title*="chunk_stepper"]').count():
        view(page).get_by_text(COUNTER).first.wait_for()
    page.wait_for_timeout(1500)  # late figures and fonts
    settle(page)


@pytest.fixture(scope="module")
def context(browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1600, "height": 1800})
    context.requests = Requests(context)
    yield context
    context.close()


def check_page(context, page, server: str, where: str, screenshot: str) -> None:
    """Settle ``page``, keep its screenshot, close it, and assert that no element came from the hostile content and
    that no request left the server's port."""
    settled_frames(page)
    page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
    found = findings(page)
    off = context.requests.off_host(server)
    context.requests.urls.clear()
    page.close()
    assert not found, f"{where}: elements made from the file's content:\n{said(found)}"
    assert not off, f"{where}: requests off 127.0.0.1: {off}"


@pytest.mark.parametrize("name", PAGES)
def test_every_page_shows_hostile_content_as_text_and_fetches_nothing_off_host(context, hostile_server, name):
    page = open_page(context, context.requests, f"{hostile_server}/{name}")
    check_page(context, page, hostile_server, name, f"app-hostile-{name}.png")


@pytest.mark.parametrize("kind", ["broken", "good"])
def test_a_hostile_upload_name_stays_text_in_the_sidebar(context, hostile_server, hostile_trace_file, kind):
    """A broken trace and a good one uploaded under hostile names ("/" and all): the sidebar's error or success
    message and the picker show the name as text."""
    page = open_page(context, context.requests, hostile_server)
    settled_frames(page)
    data = hostile_trace_file.read_bytes() if kind == "good" else b"not a trace"
    box = page.locator('[data-testid="stFileUploader"] input[type="file"]').nth(1)  # "Open a trace"
    name = file_name(f"U{kind[0].upper()}", {'"': "%22"}).replace("%22", '"')  # what the server gets: %22
    box.set_input_files(files=[{"name": name, "mimeType": "", "buffer": data}])
    page.get_by_text("Opened trace:" if kind == "good" else "Could not use").first.wait_for()
    check_page(context, page, hostile_server, f"{kind} upload", f"app-hostile-upload-{kind}.png")


def test_the_other_layer_chosen_in_the_sidebar_stays_text(context, hostile_server):
    """The layer picker opened (its options: every layer path) and the one-line hostile layer chosen: the picker,
    the sidebar's note and Explore's views show its path as text."""
    page = open_page(context, context.requests, hostile_server)
    settled_frames(page)
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').nth(1).click()  # "Memory layer"
    option = page.get_by_role("option").filter(has_text="hzL0a00")
    option.wait_for()
    found = findings(page)  # the open list of options
    option.click()
    settled_frames(page)
    page.screenshot(path=str(ARTIFACTS / "app-hostile-layer.png"), full_page=True)
    found += findings(page)
    off = context.requests.off_host(hostile_server)
    context.requests.urls.clear()
    page.close()
    assert not found, f"layer: elements made from the layer's path:\n{said(found)}"
    assert not off, f"layer: requests off 127.0.0.1: {off}"
