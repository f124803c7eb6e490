"""The `mirrorgate` command: `serve`, `worker` and `check-config`.

Settings come only from the environment (see `config.VARIABLES`, which `--help` prints), so the
command line holds nothing but the choice of what to run. A configuration that cannot be
honoured exits with status 2 and every problem listed, before anything starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from mirrorgate.config import (
    VARIABLES,
    ConfigError,
    Settings,
    load_settings,
    unknown_variables,
)

__all__ = ["main"]


def _variables_help() -> str:
    lines = ["environment variables:"]
    for var in VARIABLES:
        default = f" (default: {var.default})" if var.default is not None else ""
        lines.append(f"  {var.name}\n      {var.help}{default}")
    lines.append("  AWS_REGION, AWS_ENDPOINT_URL_SQS, PUBSUB_EMULATOR_HOST\n"
                 "      read by the cloud SDKs for the sqs and pubsub backends")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirrorgate",
        description="An npm registry proxy that gates every dependency and mirrors what it "
                    "admits into your own registry. npm clients use "
                    "--registry http://HOST:PORT/npm/",
        epilog=_variables_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the proxy (and, by default, a worker in "
                                "the same process)")
    serve.add_argument("--no-worker", action="store_true",
                       help="leave mirroring to a separate `mirrorgate worker` (a sidecar)")
    commands.add_parser("worker", help="run the mirror worker alone, with its own /livez, "
                        "/readyz and /metrics on MIRRORGATE_WORKER_LISTEN")
    commands.add_parser("check-config", help="print the resolved settings (secrets redacted) "
                        "and exit 0, or print every problem and exit 2")
    return parser


def _settings() -> Settings | None:
    try:
        return load_settings()
    except ConfigError as error:
        print("mirrorgate: the configuration cannot be used:", file=sys.stderr)
        for problem in error.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None


def _check_config(settings: Settings) -> int:
    from mirrorgate.rules import RulesError, describe, load_rules

    try:
        rules = load_rules(settings.rules_file)
    except RulesError as error:
        print("mirrorgate: the configuration cannot be used:", file=sys.stderr)
        for problem in error.problems:
            print(f"  - MIRRORGATE_RULES_FILE ({settings.rules_file}): {problem}",
                  file=sys.stderr)
        return 2
    # A misspelled variable is a setting silently not applied: say so, but it is not an error
    # (the same environment may carry a newer release's variables during a rollout).
    for unknown in unknown_variables():
        print(f"mirrorgate: warning: {unknown.warning()}", file=sys.stderr)
    report = {"settings": settings.describe(), "rules": describe(rules)}
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    sys.stdout.write("\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = _settings()
    if settings is None:
        return 2
    if args.command == "check-config":
        return _check_config(settings)
    from mirrorgate.process import run

    return run(settings, command=args.command, with_worker=not getattr(args, "no_worker", False))


if __name__ == "__main__":
    sys.exit(main())
