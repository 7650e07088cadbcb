"""CI and release scripts that are Python: run them from the repository root as
``python -m ci.<name>`` (the shell wrappers beside them do)."""
