"""Strings from files and users (trace, checkpoint and upload names, layer paths, tokens, task names, labels) made
plain text for where they are shown, one function per target. The app's own fixed text is never passed through
these: its Markdown and HTML still render.

* :func:`markdown_text`: Streamlit Markdown (``st.markdown``, captions, alerts, badges, page links, widget, radio,
  tab and expander labels, ``help=`` tooltips; not selectbox options, which are plain). Every ASCII punctuation
  mark is backslash-escaped, brackets as entities (``st.badge`` puts a backslash before each bracket itself): no
  link, image, emphasis, code span, ``$maths$``, raw HTML or ``:red[…]`` directive can start. Streamlit and GFM
  also rewrite the parsed text, where escapes are gone: ``:emoji:`` and ``:material/icon:`` shortcodes, and bare
  ``http://``, ``www.`` and e-mail addresses become icons and links; a word joiner (U+2060, invisible) after each
  ``:`` and ``@`` not followed by a space, and before the ``.`` of ``www.``, stops them (``trace: x`` stays as it
  is, to read and to copy). Line breaks become spaces (no heading, list or table
  can start), and spaces at either end entities (no indented code block, none dropped).
* :func:`markdown_code`: a Markdown code span that cannot be broken out of (a backtick fence longer than any run of
  backticks inside, padded with one space each side, which CommonMark strips; a word joiner after each ``:`` not
  followed by a space, as Streamlit rewrites ``:material/`` even in code).
* :func:`html_text`: HTML text and attribute values.
* :func:`plotly_text`: Plotly titles, axis and tick labels, annotations, hover text and templates, legend names.
  Plotly reads a subset of HTML (``<a href>``, ``<b>``, ``<br>``, ``<span style>``…) and entities, takes a string
  between ``$`` signs for LaTeX and fills ``%{…}`` in templates: those characters become numeric entities, which
  Plotly turns back into the characters as plain text.
"""

from __future__ import annotations

import html
import re
import string

WORD_JOINER = "\u2060"
_LINE_BREAK = re.compile(r"\r\n?|\n")
_MARKDOWN = (
    {ord(c): "\\" + c for c in string.punctuation}
    | {ord(c): f"&#{ord(c)};" for c in "[]"}  # st.badge adds a backslash before each bracket of its label
)
_WWW_DOT = re.compile(r"(?<=www)\\\.", re.IGNORECASE)  # an escaped "." after "www", in the escaped text
_JOINED = re.compile(r"([:@])(?!\s)")  # a ":" or "@" that a shortcode, scheme or address could go on from
_CODE_COLON = re.compile(r":(?!\s)")
_EDGE_SPACES = re.compile(r"^[ \t]+|[ \t]+$")
_BACKTICKS = re.compile(r"`+")
_PLOTLY = {ord(c): f"&#{ord(c)};" for c in "&<>\"'$%{}"}


def one_line(text: object) -> str:
    """``text`` as a string on one line: each line break (``\\n``, ``\\r\\n``, ``\\r``) a space."""
    return _LINE_BREAK.sub(" ", str(text))


def markdown_text(text: object) -> str:
    """``text`` as Streamlit Markdown source that renders as exactly that text, on one line."""
    escaped = _JOINED.sub(r"\1" + WORD_JOINER, one_line(text).translate(_MARKDOWN))
    escaped = _WWW_DOT.sub(WORD_JOINER + r"\.", escaped)
    return _EDGE_SPACES.sub(lambda m: "".join(f"&#{ord(c)};" for c in m.group()), escaped)


def markdown_code(text: object) -> str:
    """``text`` as one Markdown code span (monospace, no Markdown inside), on one line."""
    line = _CODE_COLON.sub(":" + WORD_JOINER, one_line(text))
    fence = "`" * (max(map(len, _BACKTICKS.findall(line)), default=0) + 1)
    return f"{fence} {line} {fence}"


def html_text(text: object) -> str:
    """``text`` escaped for HTML text and attribute values (quotes included)."""
    return html.escape(str(text), quote=True)


def plotly_text(text: object) -> str:
    """``text`` as Plotly text that shows exactly that text, on one line: no tag, entity, LaTeX or template."""
    return one_line(text).translate(_PLOTLY)


__all__ = ["markdown_text", "markdown_code", "html_text", "plotly_text", "one_line", "WORD_JOINER"]
