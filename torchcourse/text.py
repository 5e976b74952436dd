"""The text corpus of notebook 08: Shakespeare's Sonnets, shipped as data/sonnets.txt.gz (see data/README.md)."""

import gzip
import re

from .data import data_file

_NUMERAL = re.compile(r"[IVXLC]+")


def read_sonnets() -> list[str]:
    """The 154 sonnets, in order, each as its lines joined by and ending with "\\n" (no number, no title).

    The file holds a title, then each sonnet under its Roman numeral, sonnets and numerals separated by blank
    lines. The couplet that closes a sonnet keeps its two-space indent.
    """
    with gzip.open(data_file("sonnets.txt.gz"), "rt", encoding="ascii") as f:
        blocks = [block for block in re.split(r"\n\s*\n", f.read()) if block.strip()]
    sonnets, numbered = [], False
    for block in blocks[1:]:  # blocks[0] is the title
        if _NUMERAL.fullmatch(block.strip()):
            numbered = True
        elif numbered:
            sonnets.append(block.strip("\n") + "\n")
            numbered = False
        else:
            raise ValueError(f"sonnets.txt.gz: text without a numeral before it: {block[:40]!r}")
    return sonnets


def stanzas(sonnet: str, lines: int = 4) -> list[str]:
    """A sonnet cut into pieces of `lines` lines (quatrains by default); the last piece holds what is left over
    (the closing couplet of a 14-line sonnet)."""
    rows = sonnet.splitlines(keepends=True)
    return ["".join(rows[i:i + lines]) for i in range(0, len(rows), lines)]
