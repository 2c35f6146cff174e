"""Words in the documentation site's navigation: the main navigation, and the Internals section apart.

    python tools/docs_words.py [ROOT]           # ROOT: a checkout (default: this one)
    python tools/docs_words.py ROOT --pages     # and every page with its count

A word is what `wc -w` counts, code blocks included, HTML comments (unseen) not; the prose column
leaves fenced code out.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (`!!python/name:`); they do not matter here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def pages(nav: list[Any], internals: bool = False) -> list[tuple[str, bool]]:
    """(path, under Internals) for every page in `nav`, in order."""
    found: list[tuple[str, bool]] = []
    for item in nav:
        if isinstance(item, str):
            found.append((item, internals))
            continue
        for title, value in item.items():
            inner = internals or title == "Internals"
            found += pages(value, inner) if isinstance(value, list) else [(value, inner)]
    return found


def words(text: str) -> tuple[int, int]:
    """(every word, the words outside fenced code blocks); HTML comments, which no reader sees, left out."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return len(text.split()), len(prose.split())


def main() -> int:
    """Print the counts."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--pages", action="store_true")
    args = ap.parse_args()
    config = yaml.load((args.root / "mkdocs.yml").read_text(), Loader=_Loader)
    totals = {False: [0, 0, 0], True: [0, 0, 0]}
    for path, internal in pages(config["nav"]):
        every, prose = words((args.root / config.get("docs_dir", "docs") / path).read_text())
        totals[internal][0] += 1
        totals[internal][1] += every
        totals[internal][2] += prose
        if args.pages:
            print(f"{'internals' if internal else 'main':9} {every:6,} {prose:6,}  {path}")
    for internal, (count, every, prose) in totals.items():
        name = "Internals" if internal else "main navigation"
        print(f"{name}: {count} pages, {every:,} words ({prose:,} outside code blocks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
