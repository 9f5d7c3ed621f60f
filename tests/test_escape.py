"""The escapes of analysis.figures.escape against hostile strings: exact outputs for a few, and for many that the
target reads the escaped string back as exactly the original text (CommonMark through markdown-it where it is
installed, HTML and Plotly entities through html.unescape)."""

from __future__ import annotations

import html
import re

import pytest

from analysis.figures.escape import WORD_JOINER, html_text, markdown_code, markdown_text, plotly_text

HOSTILE = [
    "![i](http://127.0.0.1:9/mdimg.png)",
    "[link](javascript:alert(1)) [d](data:text/html;base64,PHA+)",
    "**bold** __b__ *it* _it_ ~~del~~",
    "`code` ``two`` ```three``` ` lone",
    "$x^2$ and $$y$$ \\(z\\)",
    ":red[x] :blue-background[y] :material/home: :material_home: :smile: :+1:",
    "<a href='http://x.org'>a</a> <svg><a href='#'>s</a></svg> <img src=x onerror=alert(1)>",
    "www.example.com WWW.X.ORG a@b.com https://e.org/x?y=1 mailto:a@b.c",
    "%{x} %{customdata[0]} &lt; &#36; &amp;",
    "# heading\n- item\r\n> quote\r| a | b |\n|---|---|",
    "    four spaces first",
    "1. ordered",
    "\\*not\\* a\\b \\",
    "trailing  ",
    "",
    "x" * 5000 + "**" + "`" * 300,
]
HTML_BITS = re.compile(r"<|>")


def test_markdown_text_exact():
    assert markdown_text("layer_1.memory") == r"layer\_1\.memory"
    assert markdown_text("**b**") == r"\*\*b\*\*"
    assert markdown_text(":red[x]") == "\\:" + WORD_JOINER + "red&#91;x&#93;"
    assert markdown_text("http://e.org") == "http\\:" + WORD_JOINER + r"\/\/e\.org"
    assert markdown_text("a@b www.c") == "a\\@" + WORD_JOINER + "b www" + WORD_JOINER + r"\.c"
    assert markdown_text("a\nb\r\nc\rd") == "a b c d"
    assert markdown_text("  x ") == "&#32;&#32;x&#32;"
    assert markdown_text("plain words 42") == "plain words 42"
    assert markdown_text("trace: x (a @ b)") == r"trace\: x \(a \@ b\)"  # nothing can go on from ": " or "@ "


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_is_one_line_of_escaped_characters(text):
    escaped = markdown_text(text)
    assert "\n" not in escaped and "\r" not in escaped
    # every ASCII punctuation mark is escaped (a backslash, or an entity for brackets and the spaces at either end):
    # undoing the escapes and removing the word joiners gives the text back with its line breaks as spaces
    unescaped = re.sub(r"\\(.)", lambda m: html.escape(m[1]), escaped).replace(WORD_JOINER, "")
    assert html.unescape(unescaped) == re.sub(r"\r\n?|\n", " ", text)
    bare = re.sub(r"\\[!-/:-@\[-`{-~]", "", re.sub(r"&#(32|9|91|93);", "", escaped))
    assert not re.search(r"[!-/:-@\[-`{-~]", bare)  # no punctuation mark left unescaped


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_renders_as_one_text_node(text):
    markdown_it = pytest.importorskip("markdown_it", reason="needs markdown-it-py (a CommonMark parser)")
    parser = markdown_it.MarkdownIt("commonmark").enable(["strikethrough", "table"])
    one_line = re.sub(r"\r\n?|\n", " ", text)
    tokens = parser.parse("App text: " + markdown_text(text) + " (end)")
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
    children = tokens[1].children
    assert [c.type for c in children] == ["text"]
    assert children[0].content.replace(WORD_JOINER, "") == f"App text: {one_line} (end)"


def test_markdown_code_exact():
    assert markdown_code("backbone.layers.3.memory") == "` backbone.layers.3.memory `"
    assert markdown_code("a`b") == "`` a`b ``"
    assert markdown_code("``x```y`") == "```` ``x```y` ````"
    assert markdown_code("a\nb") == "` a b `"
    assert markdown_code("x:material/home:") == "` x:" + WORD_JOINER + "material/home:" + WORD_JOINER + " `"


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_code_is_one_code_span(text):
    markdown_it = pytest.importorskip("markdown_it", reason="needs markdown-it-py (a CommonMark parser)")
    parser = markdown_it.MarkdownIt("commonmark")
    tokens = parser.parse("In " + markdown_code(text) + " after")
    children = tokens[1].children
    assert [c.type for c in children] == ["text", "code_inline", "text"]
    expected = re.sub(r"\r\n?|\n", " ", text)
    if not expected.strip():  # a span of spaces only keeps its padding (CommonMark strips none): blank either way
        expected = f" {expected} "
    assert children[1].content.replace(WORD_JOINER, "") == expected
    assert children[2].content == " after"


def test_html_text():
    expected = "&lt;a href=&quot;x&quot; title=&#x27;y&#x27;&gt;&amp;&lt;/a&gt;"
    assert html_text("<a href=\"x\" title='y'>&</a>") == expected
    for text in HOSTILE:
        assert html.unescape(html_text(text)) == text
        assert not HTML_BITS.search(html_text(text)) and '"' not in html_text(text) and "'" not in html_text(text)


def test_plotly_text_exact():
    assert plotly_text("<a href='x'>$y$ %{z} & \"q\"</a>") == (
        "&#60;a href=&#39;x&#39;&#62;&#36;y&#36; &#37;&#123;z&#125; &#38; &#34;q&#34;&#60;/a&#62;"
    )
    # ordinary names read the same
    assert plotly_text("backbone.layers.3.memory / run_2-b") == "backbone.layers.3.memory / run_2-b"
    assert plotly_text("a\nb\r\nc") == "a b c"


@pytest.mark.parametrize("text", HOSTILE)
def test_plotly_text_round_trips_without_markup(text):
    escaped = plotly_text(text)
    assert html.unescape(escaped) == re.sub(r"\r\n?|\n", " ", text)
    assert not re.search(r"[<>\"'$%{}\n\r]", escaped)
    assert not re.search(r"&(?!#\d+;)", escaped)  # every & starts one numeric entity
