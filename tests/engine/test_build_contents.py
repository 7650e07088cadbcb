"""What a build contains, in the words build-info and doctor use (issue 39: "gloo" links no Gloo)."""

from __future__ import annotations

import pytest

from selector_backend.jobs.build_facts import contents, network_transport


@pytest.mark.parametrize(
    ("tensor_ops", "controllers", "expected", "transport"),
    [
        ("gloo", ("gloo",), "tensor operations and controller: TCP (the gloo controller; no Gloo library)", "tcp"),
        ("mpi", ("mpi",), "tensor operations and controller: MPI", "mpi"),
        (
            "mpi",
            ("gloo", "mpi"),
            "tensor operations: MPI; controllers: TCP (the gloo controller; no Gloo library), MPI",
            "tcp,mpi",
        ),
        (
            "nccl",
            ("gloo",),
            "tensor operations: NCCL (CPU tensors over the controller's network); "
            "controllers: TCP (the gloo controller; no Gloo library)",
            "tcp",
        ),
    ],
)
def test_a_build_says_what_it_contains(
    tensor_ops: str, controllers: tuple[str, ...], expected: str, transport: str
) -> None:
    assert contents(tensor_ops, controllers) == expected
    assert network_transport(controllers) == transport
