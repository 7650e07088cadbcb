"""The launcher's terminal, fed piece by piece as the ranks' relays would (no job needed): two ranks
never share a line, and a line the terminal ended for another rank gains no empty line after it."""

from __future__ import annotations

import io

import pytest

from selector_backend.jobs.output import Terminal


def fed(pieces: list[tuple[int, bytes]], label: bool, finish_after: int | None = None) -> bytes:
    stream = io.BytesIO()
    terminal = Terminal(stream)
    for i, (rank, data) in enumerate(pieces):
        terminal.write(rank, f"[{rank}] ".encode() if label else b"", data)
        if i == finish_after:
            terminal.finish()  # the launcher's own message comes here
    return stream.getvalue()


@pytest.mark.parametrize("label", [False, True])
def test_an_unbuffered_print_split_by_another_rank_leaves_no_empty_line(label: bool) -> None:
    """PYTHONUNBUFFERED=1: print() sends "out 0" and "\\n" in two writes, and rank 1's line can come
    between them (seen as a stray empty line in test_output_filename_writes_each_rank_to_its_own_files)."""
    out = fed([(0, b"out 0"), (1, b"out 1\n"), (0, b"\n")], label)
    assert out == (b"[0] out 0\n[1] out 1\n" if label else b"out 0\nout 1\n")


def test_a_line_ended_for_the_launcher_s_own_message_gains_no_empty_line() -> None:
    assert fed([(0, b"partial"), (0, b"\n")], label=False, finish_after=0) == b"partial\n"


@pytest.mark.parametrize("label", [False, True])
def test_empty_lines_a_rank_writes_are_kept(label: bool) -> None:
    """Only the one newline the terminal already wrote is dropped: a rank's own empty lines stay, and
    text after the cut starts a line of its own."""
    out = fed([(0, b"a"), (1, b"b\n"), (0, b"\n\n"), (0, b"c\n\n"), (1, b"d\n")], label)
    if label:
        assert out == b"[0] a\n[1] b\n[0] \n[0] c\n[0] \n[1] d\n"
    else:
        assert out == b"a\nb\n\nc\n\nd\n"
    assert fed([(0, b"x"), (1, b"y\n"), (0, b"z\n")], label=False) == b"x\ny\nz\n"
