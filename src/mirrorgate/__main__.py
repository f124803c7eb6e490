"""The `mirrorgate` command: `serve`, `worker`, `check-config`, `token new NAME` and the operator
commands (`check`, `prewarm`, `audit`, `allow`, `exposure`, `sbom`: `mirrorgate.commands`).
Settings come only from the environment (`config.VARIABLES`, which `--help` prints); a
configuration that cannot be honoured exits 2 with every problem listed, before anything
starts.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from mirrorgate.commands.cli import add_common_arguments, configure_command_logging
from mirrorgate.config import (
    VARIABLES,
    ConfigError,
    Settings,
    load_settings,
    unknown_variables,
)

__all__ = ["main"]


def _variables_help() -> str:
    from mirrorgate.rules.inforce import DEFAULT_POLICY

    # never split at a hyphen: a rule's name (`advisory-malware`) is read and searched whole
    lines = ["default policy:", *textwrap.wrap(DEFAULT_POLICY, 88, initial_indent="  ",
                                               subsequent_indent="  ", break_on_hyphens=False),
             "", "environment variables:"]
    for var in VARIABLES:
        default = f" (default: {var.default})" if var.default is not None else ""
        lines.append(f"  {var.name}\n      {var.help}{default}")
    lines.append("  AWS_REGION, AWS_ENDPOINT_URL_SQS, PUBSUB_EMULATOR_HOST\n"
                 "      read by the cloud SDKs for the sqs and pubsub backends")
    lines.append("  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...\n"
                 "      OpenTelemetry's own: traces over OTLP/HTTP when set (the otel extra)")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirrorgate",
        description="An npm registry proxy that gates every dependency and mirrors what it "
                    "admits into your own registry. npm clients use --registry set to "
                    "mirrorgate's URL and /npm/ (with the default MIRRORGATE_LISTEN: "
                    "http://127.0.0.1:8080/npm/)",
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
    check_config = commands.add_parser(
        "check-config", help="print a summary of the settings and the rules in force, problems "
        "first, and exit 0, or print every error and exit 2")
    check_config.add_argument("--json", action="store_true",
                              help="print the whole document instead: every resolved setting "
                              "(secrets redacted) and the whole policy, as JSON")
    check = commands.add_parser(
        "check", help="report the versions lockfiles pin that the rules would refuse, with the "
        "reason and the nearest admitted version; exit 0 all admitted, 1 findings, 2 a "
        "lockfile or setting that cannot be used")
    check.add_argument("lockfiles", nargs="+", type=Path, metavar="LOCKFILE",
                       help="package-lock.json, npm-shrinkwrap.json, pnpm-lock.yaml, "
                       "yarn.lock or bun.lock")
    add_common_arguments(check)
    check.add_argument("--policy", metavar="NAME",
                       help="judge by the rules file's policy set [policy.NAME], as the proxy "
                       "judges a client whose tokens-file line says policy:NAME (default: the "
                       "default rules; with --proxy the token's own policy set decides)")
    _add_mirror_commands(commands)
    _add_allow_command(commands)
    exposure = commands.add_parser(
        "exposure", help="which clients pulled a version, a range, an advisory's versions or "
        "anything since a time, from the pull log (first and last pull, how many); exit 1 when "
        "anything was pulled, 0 when nothing, 2 on bad input")
    exposure.add_argument("target", nargs="*", metavar="WHAT",
                          help="axios@1.14.1, 'axios@>=1.14.1 <1.14.2', axios (every version) "
                          "or an advisory id (MAL-2026-1234)")
    exposure.add_argument("--since", metavar="TIME",
                          help="only pulls from this time on (ISO 8601, e.g. 2026-03-31T00:00Z)")
    exposure.add_argument("--json", action="store_true",
                          help="print one JSON document on standard output instead of a table")
    _add_sbom_command(commands)
    token = commands.add_parser("token", help="client tokens for MIRRORGATE_CLIENT_TOKENS_FILE")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    new = token_commands.add_parser("new", help="print a fresh random token for a client and "
                                    "the line to add to the tokens file")
    new.add_argument("name", help="the client's name, shown in logs and by `npm whoami`")
    return parser


def _add_sbom_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sbom = commands.add_parser(
        "sbom", help="a CycloneDX 1.6 (or SPDX 2.3) bill of materials of what a client or a CI "
        "job was served, from the pull log; exit 0, 1 when nothing matched, 2 on bad input")
    sbom.add_argument("--client", metavar="NAME",
                      help="the client's name in the tokens file (a static token, or an issuer "
                      "line's name)")
    sbom.add_argument("--repository", metavar="OWNER/REPO",
                      help="a CI job's repository, as its ID token carried it")
    sbom.add_argument("--branch", metavar="BRANCH", help="the CI job's branch (main)")
    sbom.add_argument("--ref", metavar="REF", help="the CI job's ref (refs/tags/v1.2.0)")
    sbom.add_argument("--workflow", metavar="NAME", help="the CI job's workflow (GitHub's "
                      "`workflow` claim)")
    sbom.add_argument("--since", metavar="TIME", help="pulls from this time on (ISO 8601)")
    sbom.add_argument("--until", metavar="TIME", help="pulls before this time (ISO 8601)")
    sbom.add_argument("--output", type=Path, metavar="FILE",
                      help="write the document there instead of standard output")
    sbom.add_argument("--format", choices=("cyclonedx", "spdx"), default="cyclonedx",
                      help="CycloneDX 1.6 JSON (the default) or SPDX 2.3 JSON")


def _add_mirror_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prewarm = commands.add_parser(
        "prewarm", help="enqueue a mirror job for every admitted version a lockfile pins that "
        "the private registry lacks (with the memory queue, run the worker here until done)")
    prewarm.add_argument("lockfiles", nargs="+", type=Path, metavar="LOCKFILE",
                         help="package-lock.json, npm-shrinkwrap.json, pnpm-lock.yaml, "
                         "yarn.lock or bun.lock")
    prewarm.add_argument("--wait", action="store_true",
                         help="follow each job until the private registry holds the version")
    prewarm.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                         help="how long --wait (or the memory queue's worker) may take "
                         "(default 600); what is not done by then is reported pending")
    audit = commands.add_parser(
        "audit", help="check every mirrored version: its bytes against the integrity it was "
        "admitted with, its admission under today's rules (read-only)")
    audit.add_argument("lockfiles", nargs="*", type=Path, metavar="LOCKFILE",
                       help="audit the packages these lockfiles pin")
    audit.add_argument("--names", action="append", default=[], metavar="NAME,...",
                       help="audit these packages (comma-separated; may be repeated)")
    audit.add_argument("--search", action="store_true",
                       help="audit every package the private registry's search lists "
                       "(Verdaccio); without names the file store is walked entirely")
    add_common_arguments(prewarm)
    add_common_arguments(audit)


def _add_allow_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    allow = commands.add_parser(
        "allow", help="grant a waiver: admit one version past the rules until a date, on "
        "every mirrorgate sharing the state store within a second (--list, --revoke)")
    allow.add_argument("subject", nargs="?", metavar="NAME@VERSION",
                       help="the exact version to admit")
    allow.add_argument("--why", metavar="TEXT", help="why it is admitted (required)")
    allow.add_argument("--until", metavar="DATE",
                       help="when the waiver ends: a date (2027-01-31) or an RFC 3339 time "
                       "(required)")
    allow.add_argument("--by", metavar="NAME", help="who grants or revokes it (default: the "
                       "account running the command: $USER, else the system's name for it)")
    allow.add_argument("--integrity", metavar="SRI",
                       help="the bytes it admits, as the version's dist.integrity (default: "
                       "those the registries list for it now, looked up and shown)")
    allow.add_argument("--list", action="store_true", help="list the waivers in the store")
    allow.add_argument("--revoke", metavar="NAME@VERSION", help="end a waiver now")
    allow.add_argument("--json", action="store_true", help="print JSON")


def _run_mirror_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "prewarm":
        from mirrorgate.commands.runs import run_prewarm
        from mirrorgate.process import CommandMirroring

        return run_prewarm(settings, args.lockfiles, proxy=args.proxy, wait=args.wait,
                           within=args.timeout, as_json=args.json, mirroring=CommandMirroring)
    from mirrorgate.commands.runs import run_audit

    names = [name.strip() for given in args.names for name in given.split(",") if name.strip()]
    return run_audit(settings, args.lockfiles, names=names, search=args.search,
                     proxy=args.proxy, as_json=args.json)


def _token_new(name: str) -> int:
    # Needs no settings: it only makes a token, so it runs before the environment is read.
    from mirrorgate.access.tokens import name_problem, new_token, token_line

    problem = name_problem(name)
    if problem is not None:
        print(f"mirrorgate: {problem}", file=sys.stderr)
        return 2
    token = new_token()
    line = token_line(name, token)
    sys.stdout.write(f"token (give it to the client; it is not stored anywhere):\n  {token}\n"
                     f"line for MIRRORGATE_CLIENT_TOKENS_FILE:\n  {line}\n")
    return 0


def _settings() -> Settings | None:
    try:
        return load_settings()
    except ConfigError as error:
        print("mirrorgate: the configuration cannot be used:", file=sys.stderr)
        for problem in error.problems:
            print(f"  - {problem}", file=sys.stderr)
        # a misspelled variable is often the cause (`MIRRORGATE_PUBLIC_UPSTREM` set, the real
        # one "not set"): name it here too, not only when the configuration is otherwise good
        for unknown in unknown_variables():
            print(f"mirrorgate: warning: {unknown.warning()}", file=sys.stderr)
        return None


def _check_config(settings: Settings, as_json: bool) -> int:
    from mirrorgate.rules import RulesError, load_rules, rules_summary

    try:
        rules = load_rules(settings.rules_file, settings.malware_feed)
    except RulesError as error:
        print("mirrorgate: the configuration cannot be used:", file=sys.stderr)
        for problem in error.problems:
            print(f"  - MIRRORGATE_RULES_FILE ({settings.rules_file}): {problem}",
                  file=sys.stderr)
        return 2
    if settings.client_tokens_file is not None:
        from mirrorgate.access.tokens import ClientTokens, ClientTokensError, policy_problem

        path = settings.client_tokens_file
        try:
            tokens = ClientTokens(path, check=lambda found: policy_problem(found, rules,
                                                                           str(path)))
        except ClientTokensError as error:
            print("mirrorgate: the configuration cannot be used:", file=sys.stderr)
            print(f"  - MIRRORGATE_CLIENT_TOKENS_FILE: {error}", file=sys.stderr)
            return 2
        clients = tokens.file.summary() | {"audience": settings.oidc.audience}
    from datetime import UTC, datetime

    # A misspelled variable is a setting silently not applied: say so, but it is not an error
    # (the same environment may carry a newer release's variables during a rollout).
    problems = [*(unknown.warning() for unknown in unknown_variables()),
                *settings.warnings(), *rules.warnings(datetime.now(UTC))]
    from mirrorgate.rules.inforce import in_force
    from mirrorgate.tracing import plan

    # the OTEL_* variables are the SDK's own, read here as the process would read them
    policy = rules_summary(rules)
    report: dict[str, Any] = {"settings": settings.summary(), "rules": policy,
                              "rules_in_force": in_force(rules), "tracing": plan().summary()}
    if rules.policies:
        # each policy set whole, and the lines of the tokens file that are judged by it
        named = tokens.file.policies() if settings.client_tokens_file is not None else {}
        report["policies"] = {name: {"rules_in_force": in_force(found),
                                     "clients": named.get(name, []),
                                     "rules": rules_summary(found)}
                              for name, found in rules.policies.items()}
    if settings.client_tokens_file is not None:
        report["clients"] = clients
    if rules.advisories is not None:
        readable = _probe_advisories(rules.advisories.source)
        policy["advisories"]["readable"] = readable
        if not readable["ok"] and rules.advisories.by_default:
            problems.append(
                f"the known-malware feed cannot be read: {readable['detail']}; versions are "
                "admitted as if it knew none until it can; point MIRRORGATE_MALWARE_FEED at a "
                "reachable copy, or set it to off to say so on purpose")
        elif not readable["ok"]:
            problems.append(f"the advisory source is not readable: {readable['detail']}")
    report["store"] = _probe_store(settings)
    if not report["store"].get("reachable"):
        problems.append(f"the state store does not answer: {report['store'].get('detail')}")
    if as_json:
        # the document is for programs: what a person should know goes to stderr beside it
        for problem in problems:
            print(f"mirrorgate: warning: {problem}", file=sys.stderr)
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
        return 0
    from mirrorgate.commands.configreport import human_report

    sys.stdout.write(human_report(settings, rules, report, problems))
    return 0


def _probe_store(settings: Settings) -> dict[str, object]:
    """The state store in use, where it lives and its schema version (a warning when it does
    not answer: a running process waits for it with /readyz 503, docs/state-store.md)."""
    import asyncio

    from mirrorgate.store import probe_store

    return asyncio.run(probe_store(settings.store))


def _probe_advisories(source: str) -> dict[str, object]:
    """Whether the advisory source can be read now (a warning, not an error: serving starts
    without it and the rules' `unavailable` setting decides)."""
    import asyncio
    from pathlib import Path

    from mirrorgate.advisories.source import SourceError, is_url, probe_local, probe_url

    try:
        detail = asyncio.run(probe_url(source)) if is_url(source) else probe_local(Path(source))
    except SourceError as error:
        return {"ok": False, "detail": str(error)}
    return {"ok": True, "detail": detail}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "token":
        return _token_new(args.name)
    settings = _settings()
    if settings is None:
        return 2
    if args.command == "check-config":
        return _check_config(settings, args.json)
    if args.command == "check":
        from mirrorgate.commands.check import run_check

        configure_command_logging(settings.logs)
        return run_check(settings, args.lockfiles, proxy=args.proxy, as_json=args.json,
                         policy=args.policy)
    if args.command == "allow":
        from mirrorgate.commands.allow import run_allow

        configure_command_logging(settings.logs)
        return run_allow(settings, args.subject, why=args.why, until=args.until, by=args.by,
                         listing=args.list, revoke=args.revoke, as_json=args.json,
                         integrity=args.integrity)
    if args.command == "exposure":
        from mirrorgate.commands.exposure import run_exposure

        configure_command_logging(settings.logs)
        return run_exposure(settings, " ".join(args.target) or None, args.since,
                            as_json=args.json)
    if args.command == "sbom":
        from mirrorgate.commands.exposure import QuestionError
        from mirrorgate.commands.sbom import run_sbom, select

        configure_command_logging(settings.logs)
        try:
            selection = select(client=args.client, repository=args.repository,
                               branch=args.branch, ref=args.ref, workflow=args.workflow,
                               since=args.since, until=args.until)
        except QuestionError as error:
            print(f"mirrorgate sbom: {error}", file=sys.stderr)
            return 2
        return run_sbom(settings.store, selection, output=args.output, form=args.format)
    if args.command in ("prewarm", "audit"):
        configure_command_logging(settings.logs)
        return _run_mirror_command(settings, args)
    from mirrorgate.process import Shape, run

    return run(settings, Shape.of(args.command, with_worker=not getattr(args, "no_worker", False)))


if __name__ == "__main__":
    sys.exit(main())
