"""Figures as files: one offline HTML page, or PNG images.

Plotly figures become PNGs by drawing them in headless Chromium (Debian's ``/usr/bin/chromium``
through Playwright, the browser the tests use) and asking Plotly.js for the image, so 3D scenes
come out as the browser draws them. Without Chromium, :func:`figure_pngs` raises a RuntimeError
saying how to install it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from analysis.figures.escape import html_text
from tensor_memory.optional import require

CHROMIUM = Path("/usr/bin/chromium")
PNG_SIZE = (900, 600)  # pixels, before the scale factor
PNG_NEEDS = ("playwright.sync_api", "export", "PNG export")  # require()'s arguments: module, group, feature


def figures_html(figs: Mapping[str, go.Figure], title: str) -> str:
    """One self-contained HTML page (Plotly's JavaScript inlined once) with every figure under its name."""
    parts = [
        f"<section><h2>{html_text(name)}</h2>"
        f"{fig.to_html(full_html=False, include_plotlyjs=False, config={'displaylogo': False})}</section>"
        for name, fig in figs.items()
    ]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html_text(title)}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "h2{font-size:1.1em;border-bottom:1px solid #ddd}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head>"
        f"<body><h1>{html_text(title)}</h1>{''.join(parts)}</body></html>"
    )


def figure_pngs(figs: Mapping[str, go.Figure], scale: float = 2.0, browser: Path = CHROMIUM) -> dict[str, bytes]:
    """``{name: PNG bytes}`` of each figure, drawn by Plotly.js in headless Chromium at ``scale``× pixels."""
    if not Path(browser).exists():
        raise RuntimeError(
            f"PNG export draws the figures in Chromium, which is not at {browser}; install it with "
            "`sudo apt-get install -y chromium`, or use the camera icon above each figure"
        )
    sync_playwright = require(*PNG_NEEDS).sync_playwright

    width, height = PNG_SIZE
    out: dict[str, bytes] = {}
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(browser), args=["--no-sandbox"])
        try:
            page = chromium.new_page()
            page.set_content(
                f"<html><head><script>{get_plotlyjs()}</script></head><body><div id='plot'></div></body></html>"
            )
            for name, fig in figs.items():
                url = page.evaluate(
                    """async ([spec, width, height, scale]) => {
                        const figure = JSON.parse(spec);
                        const div = document.getElementById('plot');
                        await Plotly.newPlot(div, figure.data, figure.layout, {staticPlot: true});
                        const url = await Plotly.toImage(div, {format: 'png', width, height, scale});
                        Plotly.purge(div);
                        return url;
                    }""",
                    [fig.to_json(), width, height, scale],
                )
                out[name] = base64.b64decode(url.split(",", 1)[1])
        finally:
            chromium.close()
    return out


__all__ = ["figures_html", "figure_pngs"]
