"""Sphinx configuration for the hvd-selector docs (Sphinx + MyST Markdown).

Build: ``sphinx-build -W -b html docs docs/_build/html``. Tables of settings,
environment variables, catalog axes and the prebuilt matrix, and the command
reference, are generated from the code by ``_ext/hvd_tables.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "hvd-selector"
author = "hvd-selector developers"
copyright = "hvd-selector developers"

try:
    from selector_backend.engine.catalog import load_catalog

    release = load_catalog().version
except Exception:  # the docs still build (and the tables then fail loudly) on a broken catalog
    release = "unknown"
version = release

extensions = ["myst_parser", "hvd_tables"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]  # layout.html: a link to the navigation on narrow windows

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"hvd-selector {release}"
html_static_path = ["_static"]
html_css_files = ["wide.css"]
html_theme_options = {
    "description": "the right build of Horovod-style collectives, picked by pip",
    "fixed_sidebar": True,
    # alabaster's fixed 940px page (and basic's 800px body) clipped wide code blocks and the
    # settings table; _static/wide.css lets the page take the window (940px stays the
    # narrow-screen breakpoint), and the body no longer has a maximum width
    "body_max_width": "none",
}
# Quotes and ellipses only: "--config-setting" must not become an en dash.
smartquotes_action = "qe"
