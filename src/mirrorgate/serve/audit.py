"""`npm audit` through mirrorgate: the bulk advisory endpoint answered from the advisory index.

npm 11 (arborist's audit report) POSTs `/-/npm/v1/security/advisories/bulk` a gzip'd JSON object
of package name to the versions in the tree and reads back, per name, a list of advisories: here
exactly those an install through mirrorgate would be denied for.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from mirrorgate.advisories import PackageAdvisory
from mirrorgate.metrics import Metrics
from mirrorgate.npm.versions import parse_version
from mirrorgate.rules import LiveRules, Rules, live
from mirrorgate.rules.advisory import counted
from mirrorgate.serve.refusals import Refused, json_response

__all__ = ["AUDIT_OUTCOMES", "MAX_AUDIT_BYTES", "MAX_AUDIT_NAMES", "AuditRoute"]

AUDIT_OUTCOMES: tuple[str, ...] = ("answered", "unavailable", "no_source", "quick_refused")
"""The `outcome` label of the audit requests metric."""
MAX_AUDIT_BYTES = 16 * 1024 * 1024
MAX_AUDIT_NAMES = 50_000
_NPM_SEVERITY = {"low": "low", "medium": "moderate", "high": "high", "critical": "critical",
                 "unknown": "info"}


def _advisory_json(entry: PackageAdvisory) -> dict[str, Any]:
    advisory = entry.advisory
    cvss: dict[str, Any] = {"score": advisory.cvss_score or 0, "vectorString": advisory.cvss_vector}
    return {
        "id": advisory.id,
        "url": advisory.url or "",
        "title": advisory.summary or advisory.id,
        "severity": _NPM_SEVERITY.get(advisory.severity, "info"),
        "vulnerable_versions": entry.npm_range(),
        "cwe": list(advisory.cwe),
        "cvss": cvss,
    }


async def _read_body(request: web.Request) -> dict[str, list[str]]:
    """The request, bounded (`MAX_AUDIT_BYTES` once decompressed: aiohttp inflates the gzip)
    and read strictly: an object of names to arrays of version strings, at most
    `MAX_AUDIT_NAMES` names."""
    body = await request.content.read(MAX_AUDIT_BYTES + 1)
    if len(body) > MAX_AUDIT_BYTES:
        raise Refused(413, f"the audit request is larger than {MAX_AUDIT_BYTES} bytes",
                      reason="too large")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Refused(400, "the audit request is not JSON: npm sends an object of package "
                      "names to arrays of versions", reason="invalid") from None
    if not isinstance(document, dict) or len(document) > MAX_AUDIT_NAMES:
        raise Refused(400, "the audit request should be an object of package names to arrays "
                      f"of versions (at most {MAX_AUDIT_NAMES} names)", reason="invalid")
    wanted: dict[str, list[str]] = {}
    for name, versions in document.items():
        if isinstance(versions, list):
            wanted[name] = [v for v in versions if isinstance(v, str) and len(v) <= 256]
    return wanted


class AuditRoute:
    """The bulk advisory endpoint and the quick endpoint's refusal."""

    def __init__(self, rules: Rules | LiveRules, metrics: Metrics) -> None:
        self._rules = live(rules)
        self.metrics = metrics

    @property
    def rules(self) -> Rules:
        return self._rules.current

    async def quick(self, request: web.Request) -> web.Response:
        """501, saying to use bulk: npm tries this older endpoint only when bulk fails."""
        self.metrics.audits.labels("quick_refused").inc()
        raise Refused(501, "mirrorgate answers npm audit on the bulk advisory endpoint "
                      "(/-/npm/v1/security/advisories/bulk), which npm 7 and later use first; "
                      "this older quick audit endpoint is not offered", reason="use bulk")

    async def bulk(self, request: web.Request) -> web.Response:
        advisories = self.rules.advisories
        if advisories is None:
            self.metrics.audits.labels("no_source").inc()
            raise Refused(404, "mirrorgate has no advisory source: add an [advisories] table "
                          "to the rules file to answer npm audit", reason="no advisories")
        index = advisories.feed.index
        if index is None:
            self.metrics.audits.labels("unavailable").inc()
            raise Refused(503, "mirrorgate has not loaded its advisory data yet; try again "
                          "shortly", reason="advisories unavailable",
                          headers={"Retry-After": "30"})
        wanted = await _read_body(request)
        answer: dict[str, list[dict[str, Any]]] = {}
        for name, versions in wanted.items():
            entries = index.entries(name)
            if not entries:
                continue
            keys = [(v, parsed.key if (parsed := parse_version(v)) is not None else None)
                    for v in versions]
            found = []
            for entry in entries:
                for version, key in keys:
                    # The advisories the gate would refuse a version for (the same `counted`
                    # test: malware under `malware = "deny"`, severity at or above the
                    # threshold, not ignored), and only for a version the request names.
                    hit = entry.hit(version, key)
                    if hit is not None and counted(advisories, hit) is not None:
                        found.append(_advisory_json(entry))
                        break
            if found:
                answer[name] = found
        self.metrics.audits.labels("answered").inc()
        return json_response(200, answer)
