"""Subcommands of ``hvd-selector``; see selector_backend.cli for the protocol."""
