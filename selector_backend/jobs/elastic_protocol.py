"""What an elastic launcher and its workers say to each other through the control store.

The launcher's control store (its own secret, given to every worker's
supervisor on stdin) lives as long as the job. Each generation gets a store
and a secret of its own: the workers of generation N meet in N's store and
build N's mesh under N's secret, so no connection of an older generation can
ever join a newer mesh. Keys in the control store:

* ``current``: the newest generation's number;
* ``g<N>/<worker>``: that worker's place in generation N (an Assignment as
  JSON); a worker absent from generation N has no key there.

The generation's secret crosses the network wrapped (XOR) with a one-time
pad HMAC(control secret, generation ‖ worker): the control store's messages
are authenticated, not encrypted, and the secret must not be readable on
the wire.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import asdict, dataclass

CURRENT_KEY = "current"
ELASTIC_ENV = "HVD_SELECTOR_ELASTIC"  # host:port of the control store
WORKER_ENV = "HVD_SELECTOR_WORKER"  # this worker's name in the control store
FIRST_GENERATION_ENV = "HVD_SELECTOR_FIRST_GENERATION"  # the generation the worker was started for


def assignment_key(generation: int, worker: str) -> str:
    return f"g{generation}/{worker}"


def _pad(control_secret: bytes, generation: int, worker: str) -> bytes:
    return hmac.digest(control_secret, f"elastic-secret|{generation}|{worker}".encode(), "sha256")


def wrap_secret(control_secret: bytes, generation: int, worker: str, secret: bytes) -> str:
    """``secret`` (32 bytes) as hex, XOR-ed with this worker's pad for this generation."""
    pad = _pad(control_secret, generation, worker)
    if len(secret) != len(pad):
        raise ValueError(f"a generation secret must be {len(pad)} bytes")
    return bytes(a ^ b for a, b in zip(secret, pad, strict=True)).hex()


def unwrap_secret(control_secret: bytes, generation: int, worker: str, wrapped: str) -> bytes:
    pad = _pad(control_secret, generation, worker)
    return bytes(a ^ b for a, b in zip(bytes.fromhex(wrapped), pad, strict=True))


@dataclass(frozen=True)
class Assignment:
    """One worker's place in one generation: its identity and where that generation meets."""

    generation: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    rendezvous: str  # host:port of the generation's store
    secret: str  # wrapped (wrap_secret)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Assignment:
        fields = json.loads(data)
        return cls(
            int(fields["generation"]),
            int(fields["rank"]),
            int(fields["size"]),
            int(fields["local_rank"]),
            int(fields["local_size"]),
            str(fields["rendezvous"]),
            str(fields["secret"]),
        )
