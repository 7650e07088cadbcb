"""The launcher's published limits, in a module that imports nothing.

``hvd-selector run --help`` states them, and building the CLI's parser must
not load the launcher (ctypes, subprocess, the store), so they live here and
both read them.
"""

REPORT_SECONDS = 0.5  # after the first failure, before the others are signalled
GRACE_SECONDS = 5.0  # after a signal, before SIGKILL (horovodrun waits 5 s too)
CHUNK_BYTES = 64 << 10  # the most of one rank's stream the launcher holds at once
