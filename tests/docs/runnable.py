"""Runnable blocks of the docs: find them, run them, compare output doctest-style.

A fenced ``console`` block right after ``<!-- runnable -->`` (or
``<!-- runnable: docs-venv -->`` to run inside the session's fresh virtual
environment) holds ``$ command`` lines, each followed by the output it shows.
``<!-- runnable: NAME=VALUE ... -->`` runs it with those variables set, which the
reader does not see: recorded NVML answers for the machine the page describes
(``HVD_SELECTOR_NVML_REPLAY=tests/data/nvml/gtx1080.json``; a value under
``tests/`` or ``examples/`` is a path in the repository), its CPU
(``HVD_SELECTOR_TARGET=icelake``). Outside the docs venv ``hvd-selector`` is the
checkout's, and ``examples/`` is the repository's.
A line ``...`` matches any number of lines, ``...`` inside a line any text.
A ``python`` block after ``<!-- runnable: 2 ranks -->`` runs as a 2-rank job
(``hvd-selector run -np 2``) in the docs venv and must exit 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARK = re.compile(r"^<!-- runnable(?::\s*(?P<mode>[^>]*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\w+)\s*$")
SEPARATOR = "@@hvd-docs-command@@"


@dataclass(frozen=True)
class Step:
    command: str
    expected: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    mode: str  # "", "docs-venv", "2 ranks", or NAME=VALUE assignments
    lang: str
    text: str

    @property
    def env(self) -> dict[str, str]:
        """The NAME=VALUE assignments of the mark (none for the named modes)."""
        return dict(word.split("=", 1) for word in self.mode.split() if "=" in word)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def steps(self) -> list[Step]:
        steps: list[Step] = []
        command: str | None = None
        expected: list[str] = []
        lines = self.text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                if command is not None:
                    steps.append(Step(command, tuple(expected)))
                command, expected = line[2:], []
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
            elif command is not None:
                expected.append(line)
            i += 1
        if command is not None:
            steps.append(Step(command, tuple(expected)))
        return steps


def find_blocks(docs: Path) -> list[Block]:
    blocks = []
    for page in sorted(docs.rglob("*.md")):
        if "_build" in page.parts:
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            mark = MARK.match(line)
            if not mark or n + 1 >= len(lines) or not (fence := FENCE.match(lines[n + 1])):
                continue
            end = next(k for k in range(n + 2, len(lines)) if lines[k].startswith("```"))
            text = "\n".join(lines[n + 2 : end])
            blocks.append(
                Block(page.relative_to(docs).as_posix(), n + 2, (mark["mode"] or "").strip(), fence["lang"], text)
            )
    # installs first: later blocks use what they installed
    return sorted(blocks, key=lambda b: ("pip install" not in b.text, b.page, b.line))


def pattern(expected: tuple[str, ...]) -> re.Pattern[str]:
    """A regex for the shown output: ``...`` lines skip lines, ``...`` in a line skips text."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def script(steps: list[Step]) -> str:
    """One bash script for a block (state such as cd carries over); a separator before each command."""
    body = ["set +e"]
    for step in steps:
        body.append(f"echo '{SEPARATOR}'")
        body.append(f"{step.command} 2>&1")
        body.append(f'echo "{SEPARATOR} rc=$?"')
    return "\n".join(body) + "\n"


def split_output(text: str, count: int) -> list[tuple[str, int]]:
    """(output, exit code) per command of a script() run."""
    chunks = re.findall(rf"{SEPARATOR}\n(.*?){SEPARATOR} rc=(\d+)\n", text, flags=re.S)
    assert len(chunks) == count, f"expected {count} commands, got {len(chunks)}:\n{text}"
    return [(out, int(rc)) for out, rc in chunks]
