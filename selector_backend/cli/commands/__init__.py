"""Subcommands of ``hvd-selector``; see selector_backend.cli.main for the protocol."""
