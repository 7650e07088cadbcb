"""The ``hvd-selector`` command line: ``main`` parses, each ``commands`` module is one subcommand."""

__all__ = ["commands", "main"]
