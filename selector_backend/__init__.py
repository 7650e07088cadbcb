"""The selector engine and PEP 517 backend."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""This package's directory; its parent is the repository root in a source checkout."""
