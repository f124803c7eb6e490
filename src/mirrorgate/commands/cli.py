"""What every operator command's command line shares: `--json` and `--proxy URL`, and quiet
logs (warnings and errors on standard error, so the progress bar and the result stay legible).
"""

from __future__ import annotations

import argparse

from mirrorgate.config import LogSettings
from mirrorgate.logs import configure_logging, register_secret

__all__ = ["add_common_arguments", "configure_command_logging"]


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on standard output instead of tables")
    parser.add_argument("--proxy", metavar="URL",
                        help="ask a running mirrorgate (its root or /npm/ URL) instead of the "
                        "upstreams; sends MIRRORGATE_PROXY_TOKEN when set")


def configure_command_logging(settings: LogSettings) -> None:
    """The proxy's logging, but at warning unless MIRRORGATE_LOG_LEVEL asks for debug or for
    errors only: a command's info lines (one per packument filled) would bury its output."""
    level = settings.log_level if settings.log_level in ("debug", "error") else "warning"
    configure_logging(level, settings.log_format)
    for secret in settings.secrets:  # as `process.run` does
        register_secret(secret.reveal())
