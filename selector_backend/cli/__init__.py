"""The ``hvd-selector`` command line: ``main`` dispatches, each ``commands`` module is one subcommand, whose
options are declared once (``arguments``) and read by argparse (``parsers``) where a plain reading cannot."""

__all__ = ["arguments", "commands", "main", "parsers"]
