"""Explore's volume controls in a laptop-sized window (1280 × 900, the sidebar open): no control is cut off. The
Slices box shows its whole choice, and its open list lies inside the window with every choice whole. A screenshot
goes to test-artifacts/."""

from __future__ import annotations

from test_app_browser import ARTIFACTS, COUNTER, TIMEOUT_MS, browser, server, settle, view  # noqa: F401

WIDTH, HEIGHT = 1280, 900
# Whether an element's text is drawn whole inside its box: an input's value is cut when it scrolls; other text
# when the box of its characters reaches past the element's.
WHOLE = """e => {
    if (e.tagName === "INPUT") return e.scrollWidth <= e.clientWidth;
    const range = document.createRange();
    range.selectNodeContents(e);
    const text = range.getBoundingClientRect(), box = e.getBoundingClientRect();
    return text.left >= box.left - 0.5 && text.right <= box.right + 0.5;
}"""


def inside(box: dict, width: float, height: float) -> bool:
    return box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height


def test_the_slices_box_and_its_list_show_every_choice_whole(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server)
    view(page).get_by_text(COUNTER).first.wait_for()
    settle(page)
    slices = page.locator('[data-testid="stSelectbox"]').filter(has_text="Slices")
    value = slices.get_by_role("combobox")
    assert value.input_value() == "through this chunk's write" and value.evaluate(WHOLE)
    assert inside(slices.bounding_box(), WIDTH, HEIGHT)
    for control in page.locator('[data-testid="stButtonGroup"] button').all():  # State, Channels, Plotly 3D view
        assert control.evaluate(WHOLE), control.inner_text()
    assert page.get_by_text("PyVista", exact=True).evaluate(WHOLE)
    slices.get_by_role("button", name="Open").click()
    listbox = page.get_by_role("listbox")
    listbox.wait_for()
    assert inside(listbox.bounding_box(), WIDTH, HEIGHT)
    choices = listbox.get_by_role("option")
    assert choices.all_inner_texts() == [
        "through this chunk's write",
        "through this chunk's read",
        "through the centre",
    ]
    for choice in choices.all():
        assert choice.evaluate(WHOLE), choice.inner_text()
        assert inside(choice.bounding_box(), WIDTH, HEIGHT)
    page.screenshot(path=str(ARTIFACTS / "app-explore-slices-open.png"))
    page.close()
