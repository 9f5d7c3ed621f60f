"""Rebuild ``assets/python-docs/`` from Debian's ``python3.11-doc`` package (run once; the output ships).

    apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb /tmp/pydoc
    .venv/bin/python assets/build_python_docs.py /tmp/pydoc/usr/share/doc/python3.11/html/_sources

The reStructuredText sources of the Python documentation are turned into plain prose: markup
directives, field lists, section underlines, interactive sessions and literal (code) blocks are
dropped, inline roles (``:func:`len```) keep their text. Each source file is one document and goes
whole to one split, chosen by a hash of its path (about 90 / 5 / 5 %), so the test text is documents
the model never saw. Each split is one UTF-8 text file, a paragraph per line, xz-compressed.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import re
from pathlib import Path

ROLE = re.compile(r":[a-z:]+:`(?:[^`<]*<)?~?!?([^`>]*)>?`")  # :role:`text` or :role:`title <target>`
LINK = re.compile(r"`([^`<]+?)\s*(?:<[^>]*>)?`_{1,2}")  # `text <url>`_
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>_.:])\1{2,}\s*$")
SKIPPED = ("license", "changelog", "copyright", "bugs", "about")  # legal and list pages, not prose


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of one reStructuredText source."""
    out, current, literal_indent = [], [], None

    def flush() -> None:
        if current:
            out.append(" ".join(current))
            current.clear()

    for raw in text.splitlines():
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if literal_indent is not None:  # inside a literal block: skip until the text dedents
            if not line or indent > literal_indent:
                continue
            literal_indent = None
        if not line or UNDERLINE.match(line):
            flush()
            continue
        if (
            line.startswith(("..", ">>>", "...", ":", "|", "+-", "* :", "$ "))
            or line.endswith("::")
            and line.startswith("..")
        ):
            flush()
            if line.startswith(".. ") and line.endswith("::"):  # a directive whose body is code or options
                literal_indent = (
                    indent
                    if not line.startswith(
                        (
                            ".. note",
                            ".. warning",
                            ".. seealso",
                            ".. versionadded",
                            ".. versionchanged",
                            ".. deprecated",
                            ".. impl-detail",
                        )
                    )
                    else None
                )
            continue
        line = LINK.sub(r"\1", ROLE.sub(r"\1", line)).replace("``", "").replace("**", "").replace("*", "")
        if line.endswith("::"):  # "Example::" introduces a literal block; keep the sentence
            current.append(line[:-1] if not line.endswith(" ::") else line[:-3])
            flush()
            literal_indent = indent
            continue
        current.append(line)
    flush()
    return [p for p in out if len(p.split()) >= 4]  # drop headings and stray fragments


def split_of(name: str) -> str:
    bucket = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 20
    return "test" if bucket == 0 else "valid" if bucket == 1 else "train"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", type=Path, help="the html/_sources folder of python3.11-doc")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "python-docs")
    args = parser.parse_args()
    files = sorted(p for p in args.sources.rglob("*.rst.txt") if not any(part in p.name.lower() for part in SKIPPED))
    splits: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
    for path in files:
        name = str(path.relative_to(args.sources))
        splits[split_of(name)].extend(paragraphs(path.read_text(encoding="utf-8")))
    args.out.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        data = ("\n".join(lines) + "\n").encode("utf-8")
        (args.out / f"{split}.txt.xz").write_bytes(lzma.compress(data, preset=9))
        print(f"{split}: {len(lines):,} paragraphs, {len(data):,} bytes")


if __name__ == "__main__":
    main()
