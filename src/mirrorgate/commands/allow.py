"""`mirrorgate allow`: an operator grants, lists and revokes waivers without editing files.

A waiver is written to the state store (`store.waivers`), where every running process reads it
within a poll; the grant and the revoke are logged and sent to the signed webhook
(MIRRORGATE_NOTIFY_URL) from here, once, not by each replica that learns of them. It names the
bytes it admits: those the registries list for the version now, looked up as the proxy's gate
lists them (`--integrity` names them instead), so bytes published later are not waived.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
import sys
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import structlog

from mirrorgate.commands.verdicts import GateVerdicts
from mirrorgate.config import Settings
from mirrorgate.errors import MirrorgateError
from mirrorgate.events import Alert
from mirrorgate.gate.kept.waivers import listed_bytes
from mirrorgate.metrics import Metrics
from mirrorgate.moments import stamp
from mirrorgate.notify import Notifier
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import RulesError, load_rules
from mirrorgate.store import Fact, StoreSetupError, StoreUnavailableError, open_store
from mirrorgate.store.waivers import (
    EXAMPLE,
    MAX_WHY,
    UNBOUND,
    WAIVER,
    Waiver,
    WaiverError,
    parse_bytes,
    parse_subject,
    parse_until,
    stored_waivers,
)

__all__ = ["run_allow"]

log = structlog.get_logger("mirrorgate.waivers")


def run_allow(settings: Settings, subject: str | None, *, why: str | None, until: str | None,
              by: str | None, listing: bool, revoke: str | None, as_json: bool,
              integrity: str | None = None) -> int:
    """Exit 0 done, 1 nothing to revoke, 2 input that makes no waiver, bytes that cannot be
    named or a store that cannot be reached (the message says which, with an example)."""
    try:
        if listing:
            return asyncio.run(_list(settings, as_json))
        if revoke is not None:
            return asyncio.run(_revoke(settings, revoke, by))
        waiver = _asked(subject, why, until, by, datetime.now(UTC), integrity)
        return asyncio.run(_grant(settings, waiver, as_json))
    except WaiverError as error:
        print(f"mirrorgate allow: {error}\n  for example: {EXAMPLE}", file=sys.stderr)
        return 2
    except (StoreUnavailableError, StoreSetupError) as error:
        print(f"mirrorgate allow: {error}", file=sys.stderr)
        return 2


def _who(by: str | None) -> str:
    """Who grants or revokes: `--by`, else the account running the command (USER or LOGNAME,
    else the system's name for this uid: a `kubectl exec` shell sets no USER)."""
    if by is not None:
        if not by.strip():
            raise WaiverError("--by is empty: give the name of who grants it, e.g. --by alice")
        return by.strip()
    try:
        who = getpass.getuser().strip()
    except (KeyError, OSError):  # a uid the system has no name for (3.13 raises OSError)
        who = ""
    if not who:
        # a container running as an arbitrary uid: no waiver is granted by nobody
        raise WaiverError(f"who grants it is not known: USER is not set and this account "
                          f"(uid {os.getuid()}) has no name on this system; give --by NAME")
    return who


def _asked(subject: str | None, why: str | None, until: str | None, by: str | None,
           now: datetime, integrity: str | None) -> Waiver:
    if subject is None:
        raise WaiverError("name the version to admit, NAME@VERSION (or --list, or --revoke "
                          "NAME@VERSION)")
    name, version = parse_subject(subject)
    if why is None or not why.strip():
        raise WaiverError("--why is required: say why this version is admitted despite the "
                          "rules")
    if len(why) > MAX_WHY:
        raise WaiverError(f"--why is {len(why)} characters; at most {MAX_WHY}")
    if until is None:
        raise WaiverError("--until is required: a waiver ends (a date or an RFC 3339 time)")
    ends = parse_until(until, now)
    named = parse_bytes(integrity) if integrity is not None else ""
    return Waiver(name, version, _who(by), " ".join(why.split()), ends, now, named)


async def _listed(settings: Settings, name: str, version: str) -> str:
    """The bytes the proxy's gate lists for `name@version` now (its own upstreams, rules and
    ownership, nothing kept): what the operator is shown and the waiver names."""
    try:
        rules = load_rules(settings.rules_file)
    except RulesError as error:
        raise WaiverError(f"MIRRORGATE_RULES_FILE ({settings.rules_file}): {error}") from None
    gate = await GateVerdicts.open(settings.upstreams, settings.gate, rules)
    try:
        return await listed_bytes(gate.gate.gated, parse_name(name), version)
    except WaiverError:
        raise
    except MirrorgateError as error:  # an upstream's failure, a packument too large
        raise WaiverError(f"the bytes of {name}@{version} could not be looked up ({error}); "
                          "give --integrity SRI, the version's dist.integrity, to name them"
                          ) from None
    finally:
        await gate.close()


def _notifier(settings: Settings) -> Notifier | None:
    if settings.notify.url is None:
        return None
    source = settings.public_url or f"urn:mirrorgate:{socket.gethostname()}"
    return Notifier(settings.notify, Metrics(), source=source, process="allow")


async def _tell(settings: Settings, alert: Alert) -> None:
    notifier = _notifier(settings)
    if notifier is None:
        return
    await notifier.start()
    notifier.post(alert)
    await notifier.close()  # sent before the command returns, within the close's bound


async def _grant(settings: Settings, waiver: Waiver, as_json: bool) -> int:
    if not waiver.integrity:
        waiver = replace(waiver, integrity=await _listed(settings, waiver.name,
                                                         waiver.version))
    store = await open_store(settings.store)
    try:
        await store.put_facts([waiver.fact()])
    finally:
        await store.close()
    log.warning("waiver_granted", **waiver.shown())  # warning: a command's info is quiet
    await _tell(settings, Alert(
        "waiver-granted", waiver.subject,
        f"{waiver.subject} is admitted past every rule until {stamp(waiver.until)}, granted by "
        f"{waiver.by}: {waiver.why}", waiver.name, waiver.version,
        {key: value for key, value in waiver.shown().items() if key != "package"}))
    if as_json:
        sys.stdout.write(orjson.dumps(waiver.shown()).decode() + "\n")
    else:
        sys.stdout.write(f"{waiver.subject} ({waiver.integrity}) admitted until "
                         f"{stamp(waiver.until)} (by {waiver.by}: {waiver.why}); every "
                         "mirrorgate on this store applies it within a second, to these bytes "
                         "alone (other bytes listed later as this version are not waived). "
                         f"Revoke: mirrorgate allow --revoke {waiver.subject}\n")
    return 0


async def _revoke(settings: Settings, subject: str, by: str | None) -> int:
    name, version = parse_subject(subject)
    key = f"{name}@{version}"
    who = _who(by)
    store = await open_store(settings.store)
    try:
        held = {waiver.subject: waiver for waiver in await stored_waivers(store)}
        if key not in held:
            print(f"mirrorgate allow: no waiver for {key} (mirrorgate allow --list shows "
                  "them)", file=sys.stderr)
            return 1
        await store.put_facts([Fact(WAIVER, key, None)])
    finally:
        await store.close()
    waiver = held[key]
    log.warning("waiver_revoked", package=key, by=who, granted_by=waiver.by)
    await _tell(settings, Alert(
        "waiver-revoked", key, f"the waiver for {key} (granted by {waiver.by}: {waiver.why}) "
        f"was revoked by {who}; the rules decide again", name, version,
        {"by": who, "granted_by": waiver.by, "why": waiver.why}))
    sys.stdout.write(f"the waiver for {key} is revoked; every mirrorgate on this store "
                     "applies the rules to it again within a second\n")
    return 0


async def _list(settings: Settings, as_json: bool) -> int:
    store = await open_store(settings.store)
    try:
        waivers = await stored_waivers(store)
    finally:
        await store.close()
    now = datetime.now(UTC)
    if as_json:
        sys.stdout.write(orjson.dumps([waiver.shown() | {"active": waiver.active(now)}
                                       for waiver in waivers]).decode() + "\n")
        return 0
    if not waivers:
        sys.stdout.write(f"no waivers; grant one with: {EXAMPLE}\n")
    for waiver in waivers:
        state = "" if waiver.active(now) else " (ended)"
        named = waiver.integrity if waiver.bound else UNBOUND
        sys.stdout.write(f"{waiver.subject}  until {stamp(waiver.until)}{state}  by "
                         f"{waiver.by}: {waiver.why}  bytes: {named}\n")
    return 0
