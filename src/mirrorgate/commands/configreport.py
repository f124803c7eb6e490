"""`mirrorgate check-config` for a person: the few lines an operator scans on a terminal.

The whole document (`check-config --json`) stays the reference for programs; this reads top
to bottom: what is wrong first, then where clients and people go, the store, the queue, the
upstreams, and the rules in force one line each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorgate.config import Settings
from mirrorgate.rules import Rules
from mirrorgate.rules.inforce import in_force

__all__ = ["human_report"]

_WIDTH = 11


def _line(label: str, text: str) -> str:
    return f"{label:<{_WIDTH}}{text}"


def _store(settings: Settings) -> str:
    private = settings.private_upstream
    kind = ("the embedded file store" if private.startswith("file://")
            else "the organisation's registry")
    target = ("; the worker mirrors into it" if settings.mirror_target == private
              else f"; the worker mirrors into {settings.mirror_target}")
    return f"{private} ({kind}: the private upstream{target})"


def _state(found: dict[str, Any] | None) -> str:
    """The state store (docs/state-store.md): which, where, its schema now and after start-up."""
    if not found:
        return "unknown"
    where = f"{found['kind']} at {found['where']}"
    if not found.get("reachable"):
        return f"{where}, NOT answering"
    schema = found.get("schema")
    now = "not created yet" if schema == 0 else f"schema {schema}"
    return f"{where} ({now}; this release migrates it to {found['schema_latest']})"


def _waivers(found: dict[str, Any] | None) -> str:
    """The waivers in force (`mirrorgate allow`, kept in the state store)."""
    if not found or "waivers" not in found:
        return "unknown (the state store is not read: not answering or not created yet)"
    active = [w for w in found["waivers"] if w["active"]]
    # a waiver an earlier release kept names no bytes, and admits nothing (`store.waivers`)
    return "; ".join(f"{w['package']} until {w['until']} ({w['by']}: {w['why']}), bytes "
                     f"{w.get('integrity') or 'none named: admits nothing, grant it again'}"
                     for w in active) or "none (mirrorgate allow grants one)"


def _queue(settings: Settings) -> str:
    queue = settings.queue
    if queue.provider == "memory":
        return (f"memory, in this process only, at most {queue.max_depth} jobs (the newest "
                "dropped past it)")
    where = queue.sqs_queue_url if queue.provider == "sqs" else queue.pubsub_topic
    signed = "signed jobs" if queue.job_key is not None else "jobs NOT signed"
    return f"{queue.provider} {where} ({signed})"


def _rules(rules: Rules) -> list[str]:
    source = ("the default policy (no MIRRORGATE_RULES_FILE)" if rules.source == "<defaults>"
              else rules.source)
    lines = in_force(rules)
    found = [_line("rules", f"{source}: {len(lines)} rules can deny a version")]
    found += [f"{'':<{_WIDTH}}- {line}" for line in lines]
    if rules.owned:
        found.append(_line("", f"- first-party (never asked of public): "
                               f"{', '.join(rules.owned.texts())}"))
    found.append(_line("exceptions", "; ".join(
        f"{e.text} until {e.until:%Y-%m-%d} ({e.by}: {e.reason})" for e in rules.exceptions)
        or "none"))
    return found


def _judged(line: Mapping[str, Any]) -> str:
    """` (policy X)` for a tokens-file line that names a policy set, else nothing."""
    return f" (policy {line['policy']})" if line.get("policy") else ""


def _clients(clients: Mapping[str, Any] | None) -> list[str]:
    """The tokens file's clients and CI issuer lines (names and conditions, never digests)."""
    if not clients:
        return []
    found = [_line("", f"- {len(clients['static'])} static client(s): "
                       f"{', '.join(c['name'] + _judged(c) for c in clients['static'])}"
                       if clients["static"] else "- 0 static client(s): none")]
    if clients["issuer_lines"]:
        found.append(_line("", f"- CI ID tokens for audience {clients['audience']!r} from "
                               f"{', '.join(clients['issuers'])}:"))
        found += [f"{'':<{_WIDTH}}    {line['name']}: {' '.join(line['claims'])} -> "
                  f"{'publish:' + ','.join(line['publish']) if line['publish'] else 'read'}"
                  f"{_judged(line)}"
                  for line in clients["issuer_lines"]]
    return found


def _advisories(advisories: Mapping[str, Any], read: str) -> str:
    if not advisories:
        return "off (no [advisories] table, MIRRORGATE_MALWARE_FEED=off)"
    if advisories.get("by_default"):
        return (f"known malware (MAL- records) from {advisories['source']} ({read}; "
                "MIRRORGATE_MALWARE_FEED)")
    return f"{advisories['source']} ({read})"


def _policies(rules: Rules, policies: Mapping[str, Any] | None) -> list[str]:
    """Each policy set (`[policy.NAME]`): who is judged by it, and its rules where they differ
    from the default's."""
    if not rules.policies or not policies:
        return []
    default = set(in_force(rules))
    found: list[str] = []
    for name, policy in policies.items():
        who = ", ".join(policy["clients"]) or "no client yet (no tokens-file line names it)"
        found.append(_line("policy", f"{name}: for {who}"))
        changed = [line for line in policy["rules_in_force"] if line not in default]
        dropped = len([line for line in default if line not in policy["rules_in_force"]])
        found += [f"{'':<{_WIDTH}}- {line}" for line in changed]
        if dropped:
            found.append(f"{'':<{_WIDTH}}- ({dropped} default rule(s) off or changed)")
        if not changed and not dropped:
            found.append(f"{'':<{_WIDTH}}- the default rules, unchanged")
    found.append(_line("", "- every other client: the default rules above"))
    return found


def human_report(settings: Settings, rules: Rules, report: Mapping[str, Any],
                 problems: list[str]) -> str:
    """What `check-config` prints on a terminal; `problems` (warnings: nothing that stops the
    process) first."""
    lines = ([f"problems ({len(problems)}):", *(f"  - {problem}" for problem in problems)]
             if problems else ["problems: none"])
    tracing = report.get("tracing", {})
    advisories = report.get("rules", {}).get("advisories") or {}
    readable = advisories.get("readable")
    read = "readable" if readable and readable["ok"] else "NOT readable"
    lines += [
        _line("registry", f"{settings.registry_url} (give it to npm: npm install --registry "
                          f"{settings.registry_url})"),
        _line("status", settings.status_url),
        _line("store", _store(settings)),
        _line("state", _state(report.get("store"))),
        _line("waivers", _waivers(report.get("store"))),
        _line("queue", _queue(settings)),
        _line("upstreams", f"public {settings.public_upstream}"),
        _line("data", f"{settings.data_dir} (MIRRORGATE_DATA_DIR)"),
        *_rules(rules),
        *_policies(rules, report.get("policies")),
        _line("advisories", _advisories(advisories, read)),
        _line("access", f"client tokens from {settings.client_tokens_file}"
              if settings.client_tokens_file is not None
              else "open to whoever reaches it (no MIRRORGATE_CLIENT_TOKENS_FILE)"),
        *_clients(report.get("clients")),
        _line("contact", settings.operator_contact
              or "unset: refusals say \"ask mirrorgate's operator\" "
                 "(MIRRORGATE_OPERATOR_CONTACT)"),
        _line("notify", settings.notify.url.shown() if settings.notify.url is not None
              else "off"),
        _line("tracing", str(tracing.get("endpoint")) if tracing.get("on") else "off"),
        "",
        "every setting and the whole policy: mirrorgate check-config --json",
    ]
    return "\n".join(lines) + "\n"
