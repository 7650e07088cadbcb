"""Checks that a job is the job it says it is: ``run --check``, and the split-job check of ``init()``.

``hvd-selector run --check`` is like ``horovodrun --check-build``, but across
the job's hosts: the ranks run init() (which exchanges builds and fails naming
the hosts when they cannot work together), and rank 0 prints one line per host
and build.

A split job is the silent failure of an MPI build started by a launcher its
MPI cannot see (torchrun, or the other MPI's mpiexec): every process becomes
a job of one rank and trains alone, and all of them exit 0. The environment
still says how many ranks the job has, so init() compares.
"""

from __future__ import annotations

import sys

from selector_backend.jobs import jobenv
from selector_backend.jobs.build_facts import BuildFacts


def split_job_message(job: jobenv.JobEnv, size: int, facts: BuildFacts, mpi: str) -> str:
    """The one line for a job whose environment says ``job.size`` ranks but whose communicator has ``size``."""
    mpiexec = facts.config.get("mpiexec") or "mpiexec"
    return (
        f"{job.source} started this process as rank {job.rank} of {job.size} ({job.size_from}={job.size}), "
        f"but MPI ({mpi or 'the MPI this build uses'}) gave it a communicator of {size} rank(s): the job would run "
        f"as separate jobs that never meet. This is an MPI build: start it with the mpiexec of the MPI it was "
        f"built with ({mpiexec} -np {job.size} ...) or with hvd-selector run -np {job.size} ..."
    )


def refuse_split_job(job: jobenv.JobEnv | None, facts: BuildFacts) -> None:
    """After MPI init: leave the job and raise JobEnvError when the environment names another size."""
    from . import _core
    from ._build_info import library_versions

    size = int(_core.size())
    if job is None or job.size == size:
        return
    versions = library_versions()
    _core.finalize()
    raise jobenv.JobEnvError(split_job_message(job, size, facts, " ".join(versions.get("mpi", "").split())))


def main() -> int:
    import hvd_selector as hvd

    from . import buildmix

    try:
        hvd.init()
    except buildmix.IncompatibleBuildsError as exc:
        print(f"hvd-selector run --check: {exc}", file=sys.stderr)
        return 3
    if hvd.rank() == 0:
        records = hvd._api.job_builds()
        if records:
            print(buildmix.format_mix(records), flush=True)
    hvd.barrier()  # no rank closes its connections while another is still finishing init
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
