"""Requests the proxy answers with a JSON error, and the sentences in them.

Every non-2xx answer is JSON with an `error` sentence a person can act on (npm prints it) and,
for programs, fields such as `reason`, `rule`, `package`, `version`, `upstream`, `kind`.
Handlers raise `Refused` and the dispatcher answers it, so a refusal is one line anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from mirrorgate.errors import MirrorgateError
from mirrorgate.gate import VersionRecord
from mirrorgate.npm.names import PackageName
from mirrorgate.rules.license import LICENSE, LICENSE_UNKNOWN
from mirrorgate.rules.wayout import exception_how, exception_who, installable_from, instead
from mirrorgate.upstream.client import UpstreamError

__all__ = ["PREWARM", "Refused", "by_rule", "denied", "json_response", "not_mirrored", "reads_body",
           "upstream_failed"]

STATUS_TEXT_LIMIT = 300
"""Characters of a denial's reason carried in the status line (the body has all of it)."""
DEFAULT_RETRY_AFTER = "30"
"""Seconds a 503 asks the client to wait when the upstream did not say."""


class Refused(MirrorgateError):  # noqa: N818 - an outcome carried to the response, not a bug
    """A request answered with a JSON error: the status, the sentence and extra fields."""

    def __init__(self, status: int, message: str, *, reason: str | None = None,
                 headers: Mapping[str, str] | None = None, status_text: str | None = None,
                 brief_status_text: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.headers = dict(headers or {})
        self.status_text = status_text
        self.brief_status_text = brief_status_text
        """The status text for a client that prints the body's `error` after it (npm)."""
        self.fields = fields

    def response(self, reads_body: bool = False) -> web.Response:
        body: dict[str, Any] = {"error": self.message}
        if self.reason is not None:
            body["reason"] = self.reason
        body.update(self.fields)
        text = (self.brief_status_text if reads_body and self.brief_status_text
                else self.status_text)
        return json_response(self.status, body, self.headers, status_text=text)


def reads_body(user_agent: str) -> bool:
    """Whether the client prints a refusal's JSON `error` (npm: "403 <status text> - GET <url>
    - <error>"); pnpm, yarn and bun print the status line alone, so theirs carries it all."""
    return user_agent.startswith("npm/")


def json_response(status: int, body: Mapping[str, Any],
                  headers: Mapping[str, str] | None = None, *,
                  status_text: str | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body),
                        reason=_status_line_text(status_text) if status_text else None,
                        headers={"Content-Type": "application/json", **(headers or {})})


def _status_line_text(text: str) -> str:
    """Text fit for the status line: printable ASCII only (a package name or reason could
    carry anything), one line, at most STATUS_TEXT_LIMIT characters."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in text)
    if len(cleaned) > STATUS_TEXT_LIMIT:
        cleaned = cleaned[:STATUS_TEXT_LIMIT - 3] + "..."
    return cleaned


def _failure_reason(error: UpstreamError) -> str:
    """A short, stable sentence for the failure's kind (the `reason` field)."""
    label = error.label
    if error.kind == "status":
        if error.status in (429, 503):
            return f"the {label} upstream asked to retry later ({error.status})"
        return f"the {label} upstream answered {error.status}"
    return {
        "unreachable": f"the {label} upstream is unreachable",
        "timeout": f"the {label} upstream did not answer in time",
        "too-large": f"the {label} upstream's document is larger than mirrorgate reads",
        "invalid": f"the {label} upstream's document is not a usable JSON object",
        "refused": f"the {label} upstream's URL is not on its origin",
    }.get(error.kind, f"the {label} upstream failed")


def upstream_failed(error: UpstreamError, name: PackageName) -> Refused:
    """502, 503 (with Retry-After) or 504, saying which upstream failed and how."""
    status = error.client_status
    headers = {"Retry-After": error.retry_after or DEFAULT_RETRY_AFTER} if status == 503 else {}
    return Refused(status, f"the {error.label} upstream failed for {name.full}: {error}",
                   reason=_failure_reason(error), headers=headers, upstream=error.label,
                   kind=error.kind)


PREWARM = "mirrorgate prewarm LOCKFILE"
"""The command that mirrors a project's locked versions while the public upstream is up."""


def not_mirrored(error: UpstreamError, name: PackageName, version: str | None = None) -> Refused:
    """`upstream_failed` for what the private side does not hold while the public upstream
    fails: the version (or, with None, the package) is not mirrored, and the command that
    mirrors a project before the upstream goes away. A client's own cache serves what it
    holds without asking, so such a version was never pulled through mirrorgate."""
    refused = upstream_failed(error, name)
    if error.label != "public":
        return refused
    what = f"{name.full}@{version}" if version is not None else name.full
    return Refused(refused.status, f"{what} is not mirrored, and {refused.message}; to mirror "
                   f"a project before the public upstream goes away, run {PREWARM}",
                   reason=refused.reason, headers=refused.headers, mirrored=False,
                   **refused.fields)


def denied(name: PackageName, record: VersionRecord, admitted: Iterable[str] = (),
           contact: str | None = None) -> Refused:
    """The 403 for a version the gate denied (`by_rule`)."""
    denial = record.denial
    if denial is None:
        raise ValueError(f"{name.full}@{record.version} was admitted, not denied")
    licensed = denial.rule in (LICENSE, LICENSE_UNKNOWN)
    return by_rule(name, record.version, denial.rule, denial.reason, admitted, contact,
                   denial.until, (record.license or "no license") if licensed else None)


def by_rule(name: PackageName, version: str, rule: str, reason: str,
            admitted: Iterable[str] = (), contact: str | None = None,
            until_moment: datetime | None = None, detail: str | None = None) -> Refused:
    """The 403 for `version` refused by `rule`: which rule and why, then the way through (when
    a timed denial ends, the nearest admitted version among `admitted`, how to get an
    exception: `rules.wayout`). Every refusal of a version, from the packument's rules or from
    the bytes, reads the same in every client. `detail` is said beside the rule in the status
    line too (the license a license rule refused), which pnpm and yarn 4 print alone."""
    label = f"{name.full}@{version}"
    until = installable_from(until_moment)
    use = instead(version, admitted)
    nearest = f"nearest admitted: {use}" if use is not None else "no version of it is admitted"
    message = "; ".join(part for part in (
        f"mirrorgate denied {label} by its {rule} rule: {reason}", until,
        nearest, exception_how(name.full, version, contact)) if part)
    # The status line carries the verdict and the way through too: pnpm and yarn 4 print the
    # status text of a failed tarball fetch, not the body (npm prints the body's `error`).
    named = f"{rule} rule: {detail}" if detail else f"{rule} rule"
    line = "; ".join(part for part in (
        f"Forbidden: mirrorgate denied {label} ({named})", until,
        f"nearest admitted {use}" if use is not None else "", exception_who(contact)) if part)
    return Refused(403, message, reason=reason, rule=rule, package=name.full,
                   version=version, nearest_admitted=use,
                   installable_at=until_moment.isoformat() if until_moment else None,
                   status_text=line,
                   brief_status_text=f"Forbidden: mirrorgate denied {label} ({rule} rule)")
