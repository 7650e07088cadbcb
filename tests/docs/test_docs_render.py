"""The docs site in real headless Chromium at 1280px: no code block or table is cut off.

Each page is loaded with a probe script that measures every code block and
table of the body: none may be wider than its own box (content hidden or
spilling) or reach past the window. Screenshots of the widest pages are kept
under ``HVD_DOCS_SCREENSHOTS`` (default: the test's temporary directory).
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
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280
# One Chromium run: a driver page on the same (loopback http) origin loads each page in a
# 1280px iframe and measures every code block and table of its body.
DRIVER = """<!DOCTYPE html><html><body><iframe id="f" style="width:%(width)dpx;height:1000px"></iframe>
<pre id="hvd-probe"></pre><script>
const pages = %(pages)s, results = {};
const frame = document.getElementById('f');
function next(i) {
  if (i >= pages.length) { document.getElementById('hvd-probe').textContent = JSON.stringify(results); return; }
  frame.onload = () => {
    const doc = frame.contentDocument, win = frame.contentWindow, items = [];
    for (const el of doc.querySelectorAll('div.body pre, div.body table')) {
      const r = el.getBoundingClientRect();
      items.push({tag: el.tagName, right: Math.round(r.right), scroll: el.scrollWidth, client: el.clientWidth,
                  text: el.textContent.slice(0, 60)});
    }
    results[pages[i]] = {vw: win.innerWidth, items};
    next(i + 1);
  };
  frame.src = pages[i];
}
next(0);
</script></body></html>"""
SCREENSHOTS = ("reference/environment.html", "guide/docker.html", "guide/distribution.html", "reference/cli.html")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt install chromium)")]


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    base = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    return subprocess.run([*base, f"--window-size={WIDTH},1000", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs-html")
    subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(ROOT / "docs"), str(out)], check=True)
    return out


def test_no_code_block_or_table_is_cut_off_at_1280px(site: Path, tmp_path: Path) -> None:
    pages = [p.relative_to(site).as_posix() for p in sorted(site.rglob("*.html"))]
    pages = [p for p in pages if not p.startswith("_") and p not in ("genindex.html", "search.html")]
    assert len(pages) > 20
    (site / "_probe.html").write_text(DRIVER % {"width": WIDTH, "pages": json.dumps(pages)}, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        dom = chromium("--virtual-time-budget=120000", "--dump-dom", f"{base}/_probe.html").stdout
        found = re.search(r'<pre id="hvd-probe">(.*?)</pre>', dom, flags=re.S)
        assert found and found.group(1).strip(), "the probe did not finish"
        results = json.loads(html.unescape(found.group(1)))
        assert set(results) == set(pages)
        problems = [
            f"{page}: {item}"
            for page, data in results.items()
            for item in data["items"]
            if item["scroll"] > item["client"] + 1 or item["right"] > data["vw"]
        ]
        assert all(data["vw"] == WIDTH for data in results.values())
        assert not problems, "\n".join(problems)
        shots = Path(os.environ.get("HVD_DOCS_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        for name in SCREENSHOTS:
            target = shots / (name.replace("/", "-").removesuffix(".html") + ".png")
            chromium(f"--screenshot={target}", f"{base}/{name}")
            assert target.stat().st_size > 10_000, target
    finally:
        server.shutdown()
        server.server_close()
