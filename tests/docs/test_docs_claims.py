"""Claims the docs make that are not a runnable block, checked against the code.

Runnable blocks (test_docs_commands.py) check what commands print; these check
the rest a reader relies on: the files the pages use ship in the repository,
file names and messages the pages quote are the ones the code writes, help
texts name the right exit codes, and the CLI reference starts with the commands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.host import HostProfile

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HVD_SELECTOR")}
    clean["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "selector_backend", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        cwd=ROOT,
        timeout=120,
    )


def test_every_file_a_page_runs_a_command_on_ships_in_the_repository() -> None:
    """`--host-profile a100.json` sent readers looking for a file nobody had; examples/ holds them."""
    used = set()
    for page in [*PAGES, ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        used |= {(page.name, m) for m in re.findall(r"(?:--host-profile|hvd-selector plan) (\S+\.json)", text)}
    assert used
    missing = [f"{page}: {name}" for page, name in sorted(used) if not (ROOT / name).is_file()]
    assert not missing, missing
    for path in sorted((ROOT / "examples").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        profiles = data.values() if "cpu" not in data else [data]  # a fleet, or one host profile
        for profile in profiles:
            assert HostProfile.from_json(profile, source=str(path)).cpu is not None


def test_the_variants_file_is_named_as_publishing_names_it() -> None:
    from selector_backend.publishing.publish import variants_filename

    published = variants_filename(load_catalog(), "X.Y.Z")
    assert published == "hvd_selector-X.Y.Z-variants.json"
    wrong = []
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            for name in re.findall(r"`([\w.-]+-(?:X\.Y\.Z|\{version\})-variants\.json)`", line):
                legacy = re.search(r"earlier|before|still read|older", line)
                if name.replace("{version}", "X.Y.Z") != published and not legacy:
                    wrong.append(f"{page.relative_to(DOCS)}: {name}")
    assert not wrong, wrong


def test_a_detector_that_hangs_is_noted_as_troubleshooting_quotes_it(tmp_path: Path) -> None:
    slow = tmp_path / "bin" / "mpiexec"
    slow.parent.mkdir()
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    page = (DOCS / "guide" / "troubleshooting.md").read_text(encoding="utf-8")
    quoted = re.search(r"`(/\S+/mpiexec): timed out after (\d+) s`", page)
    assert quoted, "troubleshooting.md quotes the note of a detector that does not answer"
    env = {"PATH": f"{slow.parent}{os.pathsep}{os.environ['PATH']}", "HVD_SELECTOR_DETECT_TIMEOUT": "1"}
    shown = cli("detect", env=env).stdout
    assert f"{slow}: timed out after 1 s" in shown, shown


def test_help_texts_point_nowhere_a_user_cannot_go_and_name_the_real_codes() -> None:
    top = cli("--help").stdout
    assert "docs/" not in top and "hvd-selector COMMAND --help" in " ".join(top.split())
    assert "3 nothing fits or a check found a mismatch" in " ".join(top.split())
    package = " ".join(cli("spack", "package", "--help").stdout.split())
    assert "exit 3 on drift" in package and "exit 2 on drift" not in package


def test_the_cli_reference_starts_with_the_commands_and_keeps_the_speed_notes_apart() -> None:
    cli_page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    headings = re.findall(r"(?m)^(#+) (.+)$", cli_page)
    assert [h for _, h in headings[:3]] == ["Command line", "Commands", "Output formats"], headings
    before = cli_page.split("## Commands", 1)[0]
    assert "|" not in before and "```" not in before  # no table or block before the first command
    assert "```{hvd-cli-help}" in cli_page.split("## Output formats", 1)[0]
    performance = (DOCS / "reference" / "performance.md").read_text(encoding="utf-8")
    assert "## Speed at index scale" in performance and "| measured | before (20853c6) | now | aim |" in performance


def test_the_readme_installs_from_an_index_pip_can_find() -> None:
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")[1]
    assert "pip install --extra-index-url" in first, first
