"""``hvd-selector run --check``: every rank joins, rank 0 prints the job's build mix.

Like ``horovodrun --check-build``, but across the job's hosts: the ranks run
init() (which exchanges builds and fails naming the hosts when they cannot
work together), and rank 0 prints one line per host and build.
"""

from __future__ import annotations

import sys


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
