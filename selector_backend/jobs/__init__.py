"""Running jobs: the launcher, the rendezvous store, the job environment, the installed build's facts.

Pure Python and free of native code, so ``hvd-selector run`` works on a login
node whose CPU the installed build does not fit; the runtime package
(``hvd_selector``) imports the same modules on each rank.
"""

__all__ = [
    "build_facts",
    "hosts",
    "jobenv",
    "launcher",
    "limits",
    "output",
    "rank_settings",
    "rendezvous",
    "supervisor",
]
