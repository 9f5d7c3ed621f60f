"""The escapes of analysis.figures.escape in a real browser: a small Streamlit page shows hostile strings through
every kind of place the app shows a file's or a user's strings (Markdown, captions, alerts, badges, widget, radio,
tab and expander labels, tooltips, code spans, a Plotly figure's title, axes, annotation, legend and hover text), and
headless Chromium must find each shown as exactly its text: no link, image, emphasis, maths, coloured text, icon,
emoji or heading made from it, and no request for the addresses it names."""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_app_browser import ARTIFACTS, TIMEOUT_MS, browser, serve, settle  # noqa: F401 - browser: a fixture
from test_escape import HOSTILE

from analysis.figures.escape import WORD_JOINER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOWN = [s for s in HOSTILE if s.strip() and len(s) < 1000]  # the long one is checked without a browser
PAGE = """
import json, sys
sys.path.insert(0, {root!r})
import plotly.graph_objects as go
import streamlit as st
from analysis.figures.escape import markdown_code, markdown_text, plotly_text

strings = json.load(open({strings!r}))
st.markdown("App text :smile: before each string")  # the app's own shortcode: Streamlit loads its emoji plugin
for i, s in enumerate(strings):
    st.markdown(f"MD{{i}}: " + markdown_text(s))
    st.caption(f"CODE{{i}}: " + markdown_code(s))
    st.error(f"ERR{{i}}: " + markdown_text(s))
    st.badge(f"BADGE{{i}} " + markdown_text(s))
    st.radio(f"RADIO{{i}} " + markdown_text(s), [f"OPT{{i}} " + markdown_text(s)], help=markdown_text(s))
    with st.expander(f"EXP{{i}} " + markdown_text(s)):
        st.write("inside")
st.tabs([f"TAB{{i}} " + markdown_text(s) for i, s in enumerate(strings)])
figure = go.Figure()
for i, s in enumerate(strings):
    shown = plotly_text(s)
    figure.add_scatter(x=[i], y=[i], name=shown, text=[shown], hovertemplate="%{{text}}<extra></extra>")
    figure.add_annotation(x=i, y=i, text=plotly_text(s))
figure.update_layout(title=plotly_text(strings[0]), xaxis_title=plotly_text(strings[4]), showlegend=True)
st.plotly_chart(figure)
st.markdown("END OF PAGE")
"""
MADE = "a, img, strong, em, del, math, .katex, h1, h2, h3, h4, h5, h6, li, table, blockquote, hr, [role=img]"


def one_line(text: str) -> str:
    return " ".join(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


@pytest.fixture(scope="module")
def page_url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("escape_page")
    (folder / "strings.json").write_text(json.dumps(SHOWN))
    script = folder / "page.py"
    script.write_text(PAGE.format(root=ROOT, strings=str(folder / "strings.json")))
    command = [sys.executable, "-m", "streamlit", "run", str(script), "--server.address", "127.0.0.1"]
    command += ["--server.headless", "true", "--browser.gatherUsageStats", "false"]
    yield from serve(log_name="streamlit-escape-page.log", command=command, port_flag="--server.port")


def test_hostile_strings_show_as_their_text_and_make_nothing(browser, page_url):  # noqa: F811 - a fixture
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_url, timeout=TIMEOUT_MS)
    page.get_by_text("END OF PAGE").wait_for(timeout=TIMEOUT_MS)
    settle(page)
    page.wait_for_timeout(1500)  # the figure draws after the page settles
    page.screenshot(path=str(ARTIFACTS / "escape-page.png"), full_page=True)
    main = page.locator('[data-testid="stMain"]')
    # nothing was fetched but the page itself: the strings' image and link addresses never
    assert [r for r in requests if not r.startswith(page_url)] == []
    # no element made from a string: every link, image, emphasis, maths, heading, list or icon would be one
    made = main.locator('[data-testid="stMarkdownContainer"]').locator(MADE)
    assert made.count() == 0, [made.nth(i).evaluate("e => e.outerHTML") for i in range(min(made.count(), 5))]
    assert main.locator(".stMarkdownColoredText, .stMarkdownColoredBackground").count() == 0
    assert main.locator("code").count() == len(SHOWN)  # the code spans, one a string, none broken out of
    text = main.inner_text().replace(WORD_JOINER, "")
    assert text.count("😄") == 1  # the app's own shortcode; none from the strings
    for i, s in enumerate(SHOWN):
        for place in ("MD", "CODE", "ERR", "BADGE", "RADIO", "OPT", "EXP", "TAB"):
            shown = main.get_by_text(f"{place}{i}", exact=False).first.inner_text().replace(WORD_JOINER, "")
            assert " ".join(one_line(s).split()) in " ".join(shown.split()), (place, i, shown)
    # the Plotly figure: its texts as SVG text, no link among them
    plot = main.locator(".js-plotly-plot")
    assert plot.locator("a").count() == 0
    svg = " ".join(plot.locator("svg text").all_text_contents())
    for s in (SHOWN[0], SHOWN[4], *SHOWN):
        assert " ".join(one_line(s).split()) in " ".join(svg.split()), s
    page.close()
