"""``build-info``: what the installed hvd_selector was built as (horovodrun --check-build)."""

from __future__ import annotations

import argparse

NAME = "build-info"
HELP = "show the installed build: variant, CPU target and flags, tensor ops, controllers, libraries"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    import json

    from selector_backend.errors import ExternalError

    try:
        import hvd_selector
        from hvd_selector._build_info import format_text
    except ImportError as exc:
        raise ExternalError(f"hvd_selector cannot be imported: {exc}") from None
    info = hvd_selector.build_info()
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0
