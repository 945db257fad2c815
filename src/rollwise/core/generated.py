"""Pages generated from the code or the records (the README's results slot, the docs' methods and
configuration pages): write them, or check that the committed ones still match, so a stale page fails
a test instead of misleading a reader."""
from __future__ import annotations

import sys
from pathlib import Path


def between(text: str, begin: str, end: str, body: str) -> str:
    """`text` with what lies between the markers `begin` and `end` replaced by `body`, blank lines around it
    (so Markdown reads the body as Markdown, not as part of the comment's HTML block)."""
    if begin not in text or end not in text:
        raise ValueError(f"markers {begin} ... {end} not found")
    a, b = text.index(begin) + len(begin), text.index(end)
    return text[:a] + "\n\n" + body.strip("\n") + "\n\n" + text[b:]


def sync(pages: dict[Path, str], root: Path, check: bool, command: str) -> int:
    """Write each page whose text differs (printing its path), or with `check` write nothing and return 1
    naming the stale pages and the `command` that regenerates them."""
    stale = [p for p, text in pages.items() if not p.exists() or p.read_text() != text]
    if check:
        if stale:
            print(f"stale: {', '.join(str(p.relative_to(root)) for p in stale)}; run {command}", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(pages[p])
        print(f"wrote {p.relative_to(root)}")
    return 0
