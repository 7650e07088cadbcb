"""Proof that every Gloo TCP pair belongs to the job, run once after connecting.

Gloo 0.5.0 accepts whoever connects to a rank's listener first, so the core
cannot tell the real peer from a stray local process. Right after the mesh is
up, each rank sends every peer, over that very pair (an alltoall),
HMAC(job secret, nonce | sender | receiver); the nonce is fresh per init and
comes through the HMAC-authenticated rendezvous store. A pair whose other end
does not know the secret (or replays another pair's or another job's tag)
fails the check and init() stops with one line instead of exchanging data.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import numpy as np

TAG_BYTES = 32


def tag(key: bytes, nonce: bytes, sender: int, receiver: int) -> bytes:
    """What `sender` proves to `receiver` (bound to the job secret, this init, both ranks)."""
    message = b"hvd-selector data plane\0" + nonce + sender.to_bytes(4, "big") + receiver.to_bytes(4, "big")
    return hmac.new(key, message, hashlib.sha256).digest()


def prove_pairs(
    alltoall: Callable[[np.ndarray], np.ndarray], key: bytes, nonce: bytes, rank: int, size: int
) -> list[int]:
    """Exchange tags over every pair; return the ranks whose tag was wrong."""
    send = np.frombuffer(b"".join(tag(key, nonce, rank, q) for q in range(size)), dtype=np.int64)
    got = np.ascontiguousarray(alltoall(send.reshape(size, TAG_BYTES // 8))).tobytes()
    return [
        q
        for q in range(size)
        if q != rank and not hmac.compare_digest(got[q * TAG_BYTES : (q + 1) * TAG_BYTES], tag(key, nonce, q, rank))
    ]
