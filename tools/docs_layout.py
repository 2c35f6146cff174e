"""Check that the built documentation is readable at 1280 px, in headless Chromium (Debian's `chromium`).

    python tools/docs_layout.py SITE_DIR [PAGE ...] [--shots DIR]

For each page (default: every page of the site), Chromium loads it at 1280 x 900 with a script that
measures the rendered layout: a code block whose lines are wider than the block (clipped, to be
scrolled sideways), and code inside a table cell broken across lines (an identifier split mid-word).
Any of these fails the check, naming the page and the text. `--shots DIR` also saves a screenshot of
each page. Exit status 1 on a failure, 2 when Chromium is missing.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1280, 900
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
# As root, on a machine without network: no sandbox, no GPU, and no background connections.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=5000"]
MARK = "anarchon-layout"

# Measures the page once it has loaded, and writes what is wrong into the element with id MARK.
PROBE = Path(__file__).with_name("docs_layout.js")


def chromium() -> str | None:
    """The Chromium executable on PATH, if any."""
    return next((p for p in map(shutil.which, CHROMIUM) if p), None)


def pages(site: Path) -> list[Path]:
    """Every page of a built site (index.html files), the 404 page left out."""
    return sorted(p for p in site.rglob("index.html") if "assets" not in p.parts)


def check(browser: str, site: Path, page: Path, shots: Path | None, profile: Path) -> list[str]:
    """The layout problems of one built page."""
    probe = page.with_name(f"{MARK}.html")  # beside the page, so its relative links still resolve
    # Mermaid sources become diagrams in a browser that can fetch mermaid.js: not code to read.
    text = page.read_text().replace('<pre class="mermaid"', '<pre data-diagram class="mermaid"')
    probe.write_text(text.replace("</body>", f"<script>{PROBE.read_text()}</script></body>"))
    try:
        args = [browser, *FLAGS, f"--user-data-dir={profile}"]
        done = subprocess.run([*args, "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                              timeout=120, check=False)
        found = re.search(rf'<pre id="{MARK}">(.*?)</pre>', done.stdout, re.S)
        if found is None:
            return [f"Chromium did not render it (exit {done.returncode}): {done.stderr.strip()[-300:]}"]
        if shots is not None:
            name = "-".join(page.parent.relative_to(site).parts) or "index"
            subprocess.run([*args, f"--screenshot={shots / (name + '.png')}", page.as_uri()],
                           capture_output=True, timeout=120, check=False)
        problems: list[str] = json.loads(html.unescape(found.group(1)))
        return problems
    finally:
        probe.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("site", type=Path)
    ap.add_argument("pages", nargs="*", help="pages relative to the site, e.g. comparison (default: all)")
    ap.add_argument("--shots", type=Path, help="save a screenshot of each page here")
    args = ap.parse_args()
    browser = chromium()
    if browser is None:
        print("docs layout: Chromium is not installed: `apt-get install chromium` (.ci/run installs it)",
              file=sys.stderr)
        return 2
    targets = [args.site / p / "index.html" for p in args.pages] if args.pages else pages(args.site)
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory() as profile:
        for page in targets:
            problems = check(browser, args.site, page, args.shots, Path(profile))
            name = str(page.parent.relative_to(args.site)) or "index"
            for problem in problems:
                print(f"docs layout: {name}: {problem}", file=sys.stderr)
            failed += bool(problems)
    print(f"docs layout: {len(targets) - failed} of {len(targets)} pages readable at {WIDTH} px")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
