"""One rank of ``horovod.run``: load func from the job's private directory, run it, store its result.

``python -m hvd_selector_horovod.run_task DIR``: DIR is the 0700 directory
runner.run made on this host; each rank writes ``result.<rank>`` there
(written to a temporary name, then renamed: a reader never sees half a result).
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any


def _rank() -> int:
    from selector_backend.jobs.jobenv import discover

    job = discover(os.environ)
    return 0 if job is None else job.rank


def dumps(obj: Any) -> bytes:
    """cloudpickle where installed (lambdas, local functions: as Horovod), else pickle."""
    try:
        import cloudpickle  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return pickle.dumps(obj)
    return bytes(cloudpickle.dumps(obj))


def read_results(work: Path, size: int) -> list[Any]:
    """Every rank's result, by rank; a missing one is a RuntimeError naming the rank."""
    results = []
    for rank in range(size):
        path = work / f"result.{rank}"
        if not path.is_file():
            raise RuntimeError(f"horovod.run: rank {rank} left no result")
        results.append(pickle.loads(path.read_bytes()))  # written by this user's ranks into a 0700 directory
    return results


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    func, args, kwargs = pickle.loads((work / "func.pkl").read_bytes())
    result = func(*args, **kwargs)
    rank = _rank()
    partial = work / f".result.{rank}.part"
    partial.write_bytes(dumps(result))
    partial.rename(work / f"result.{rank}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
