"""Running jobs: the launcher (fixed-size and elastic), its ssh connections, the rendezvous store, the job's facts.

Pure Python and free of native code, so ``hvd-selector run`` works on a login
node whose CPU the installed build does not fit; the runtime package
(``hvd_selector``) imports the same modules on each rank.
"""

__all__ = [
    "build_facts",
    "elastic",
    "elastic_protocol",
    "hosts",
    "jobenv",
    "launcher",
    "limits",
    "output",
    "rank_settings",
    "rendezvous",
    "ssh_connections",
    "supervisor",
]
