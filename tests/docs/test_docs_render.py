"""The docs site in real headless Chromium, at 1280px and on a 390px phone.

Each page is loaded in an iframe of that width with a probe script. At 1280px
it measures every code block and table of the body: none may be wider than its
own box (content hidden or spilling) or reach past the window. At 390px the
page's title comes before the navigation, nothing makes the page wider than
the screen (a wide table or code block scrolls in its own box), code blocks
keep their lines whole, table cells break only between words, and code in the
dark navigation is readable. A screenshot of the widest pages, one under the
other, at each width is kept under ``HVD_DOCS_SCREENSHOTS`` (default: the test's
temporary directory).
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280
PHONE = 390
# One Chromium run: a driver page on the same (loopback http) origin loads each page in an
# iframe of the width under test and runs the probe on it.
DRIVER = """<!DOCTYPE html><html><body><iframe id="f" style="width:%(width)dpx;height:1000px"></iframe>
<pre id="hvd-probe"></pre><script>
const pages = %(pages)s, results = {};
const frame = document.getElementById('f');
function probe(doc, win) { %(probe)s }
function next(i) {
  if (i >= pages.length) { document.getElementById('hvd-probe').textContent = JSON.stringify(results); return; }
  frame.onload = () => { results[pages[i]] = probe(frame.contentDocument, frame.contentWindow); next(i + 1); };
  frame.src = pages[i];
}
next(0);
</script></body></html>"""
# 1280px: every code block and table of the body, its box and how far its content reaches
WIDE_PROBE = """
const items = [];
for (const el of doc.querySelectorAll('div.body pre, div.body table')) {
  const r = el.getBoundingClientRect();
  items.push({tag: el.tagName, right: Math.round(r.right), scroll: el.scrollWidth, client: el.clientWidth,
              text: el.textContent.slice(0, 60)});
}
return {vw: win.innerWidth, items};
"""
# 390px: where the title and the navigation start, how wide the page is, how code blocks wrap, whether
# a table cell (or code in it) may break inside a word, the colours of the navigation's code
PHONE_PROBE = """
const top = el => el ? Math.round(el.getBoundingClientRect().top + win.scrollY) : null;
const nav = doc.querySelector('div.sphinxsidebar'), style = el => win.getComputedStyle(el);
const broken = [], pres = [...doc.querySelectorAll('div.body pre')];
for (const el of doc.querySelectorAll('div.body td, div.body th, div.body td *, div.body th *')) {
  const wrap = style(el).overflowWrap, word = style(el).wordBreak;  // these two break a word anywhere
  if (wrap === 'anywhere' || word === 'break-all' || word === 'break-word') broken.push(el.textContent.slice(0, 40));
}
return {vw: win.innerWidth, page: doc.documentElement.scrollWidth, title: top(doc.querySelector('div.body h1')),
        nav: top(nav), wrapped: pres.filter(p => style(p).whiteSpace !== 'pre').length,
        broken, navBg: nav ? style(nav).backgroundColor : null,
        navCode: nav ? [...nav.querySelectorAll('code')].map(c => [style(c).color, style(c).backgroundColor]) : []};
"""
SCREENSHOTS = ("reference/environment.html", "guide/docker.html", "guide/distribution.html", "reference/cli.html")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt install chromium)")]


def chromium(*args: str, width: int = WIDTH, height: int = 1000) -> subprocess.CompletedProcess[str]:
    base = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    return subprocess.run(
        [*base, f"--window-size={width},{height}", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared build (devtools.docs_build), hard-linked into a folder of this module's own, where
    the probes' driver pages are written."""
    from devtools.docs_build import built_docs

    html, warnings = built_docs()
    assert not warnings, "\n".join(warnings)  # CI's `sphinx -W` would fail on them
    out = tmp_path_factory.mktemp("docs-html") / "html"
    shutil.copytree(html, out, copy_function=os.link)
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site on a loopback HTTP server (the probe reads pages of its own origin)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pages_of(site: Path) -> list[str]:
    pages = [p.relative_to(site).as_posix() for p in sorted(site.rglob("*.html"))]
    pages = [p for p in pages if not p.startswith("_") and p not in ("genindex.html", "search.html")]
    assert len(pages) > 20
    return pages


def run_probe(site: Path, base: str, width: int, probe: str) -> dict[str, Any]:
    pages = pages_of(site)
    driver = f"_probe{width}.html"
    (site / driver).write_text(DRIVER % {"width": width, "pages": json.dumps(pages), "probe": probe}, encoding="utf-8")
    dom = chromium("--virtual-time-budget=120000", "--dump-dom", f"{base}/{driver}").stdout
    found = re.search(r'<pre id="hvd-probe">(.*?)</pre>', dom, flags=re.S)
    assert found and found.group(1).strip(), "the probe did not finish"
    results: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert set(results) == set(pages)
    assert all(data["vw"] == width for data in results.values())
    return results


def screenshots(site: Path, base: str, width: int, tmp_path: Path) -> None:
    """One image of the SCREENSHOTS pages' first 1000px at ``width``, one under the other: one Chromium
    run (each costs seconds of CPU), each page in an iframe of the window's width."""
    shots = Path(os.environ.get("HVD_DOCS_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page = f"_shots{width}.html"
    style = f"display:block;border:0;width:{width}px;height:1000px"
    body = "".join(f'<iframe src="{name}" style="{style}"></iframe>' for name in SCREENSHOTS)
    (site / page).write_text(f'<!DOCTYPE html><html><body style="margin:0">{body}</body></html>', encoding="utf-8")
    target = shots / f"widest-pages-{width}.png"
    chromium(f"--screenshot={target}", f"{base}/{page}", width=width, height=1000 * len(SCREENSHOTS))
    assert target.stat().st_size > 10_000 * len(SCREENSHOTS), target


def test_no_code_block_or_table_is_cut_off_at_1280px(site: Path, served: str, tmp_path: Path) -> None:
    results = run_probe(site, served, WIDTH, WIDE_PROBE)
    problems = [
        f"{page}: {item}"
        for page, data in results.items()
        for item in data["items"]
        if item["scroll"] > item["client"] + 1 or item["right"] > data["vw"]
    ]
    assert not problems, "\n".join(problems)
    screenshots(site, served, WIDTH, tmp_path)


def _luminance(css: str) -> float:
    red, green, blue = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (red, green, blue)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _transparent(css: str) -> bool:
    return css == "transparent" or css.replace(" ", "").endswith(",0)")


def test_a_phone_gets_the_title_first_and_nothing_cut_or_broken_at_390px(
    site: Path, served: str, tmp_path: Path
) -> None:
    results = run_probe(site, served, PHONE, PHONE_PROBE)
    problems = []
    for page, data in results.items():
        if data["title"] is None or data["nav"] is None or data["title"] > data["nav"] or data["title"] > 200:
            problems.append(f"{page}: the title (at {data['title']}px) is not first, before the navigation")
        if data["page"] > PHONE + 1:
            problems.append(f"{page}: the page is {data['page']}px wide on a {PHONE}px screen")
        if data["wrapped"]:
            problems.append(f"{page}: {data['wrapped']} code blocks wrap their lines")
        if data["broken"]:
            problems.append(f"{page}: table cells may break inside a word: {data['broken'][:3]}")
        for color, background in data["navCode"]:
            behind = data["navBg"] if _transparent(background) else background
            light, dark = sorted((_luminance(color), _luminance(behind)), reverse=True)
            if (light + 0.05) / (dark + 0.05) < 4.5:  # WCAG AA contrast for text
                problems.append(f"{page}: code in the navigation is {color} on {behind}")
    assert not problems, "\n".join(sorted(set(problems))[:40])
    screenshots(site, served, PHONE, tmp_path)
