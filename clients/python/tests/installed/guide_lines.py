"""The Python install line and imports of a guide in docs/guides, for the
test script's fresh-app check of the guides:

    python3 guide_lines.py GUIDE.md [STATEMENT ...]

prints the guide's install line (its one inline or block ``pip install``,
which must install from ``./clients/python``), then one Python statement a
line: every import of its ``python`` blocks (comments left off), every
inline ``from ... import ...`` of its prose (as in a table's Import
column), and the STATEMENTs given (imports of what the guide's code uses
but does not import, e.g. the graph builder). Exits non-zero, saying why,
when the guide has no such line, more than one, or one of another form.
It needs nothing but Python; pytest does not collect it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

PREFIX = 'pip install "./clients/python['
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
IMPORT = re.compile(r"^(from \S+ import \S.*|import \S.*)$")


def install_line(text: str, guide: str) -> str:
    """The one ``pip install`` of the guide, inline or in a block."""
    found = [m.strip() for m in INLINE.findall(text) if m.strip().startswith("pip install")]
    found += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("pip install")]
    lines = sorted(set(found))
    if len(lines) != 1:
        sys.exit(f"{guide}: {len(lines)} pip install lines, not one: {lines}")
    if not lines[0].startswith(PREFIX):
        sys.exit(f"{guide}: the install line does not install from ./clients/python: {lines[0]}")
    return lines[0].split("  #")[0].strip()


def imports(text: str) -> List[str]:
    """The guide's Python imports, in order, each once."""
    out: List[str] = []
    for block in BLOCK.findall(text):
        for ln in block.splitlines():
            stmt = ln.split("#")[0].strip()
            if IMPORT.match(stmt):
                out.append(stmt)
    out += [m.strip() for m in INLINE.findall(text) if re.match(r"from \S+ import \w", m.strip())]
    return list(dict.fromkeys(out))


def main(argv: List[str]) -> None:
    guide = argv[0]
    text = Path(guide).read_text(encoding="utf-8")
    statements = imports(text) + argv[1:]
    if not statements:
        sys.exit(f"{guide}: no Python imports")
    print(install_line(text, guide))
    for stmt in statements:
        print(stmt)


if __name__ == "__main__":
    main(sys.argv[1:])
