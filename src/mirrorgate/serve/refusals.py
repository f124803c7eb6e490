"""Requests the proxy answers with a JSON error, rendered.

Every non-2xx answer is JSON with an `error` sentence a person can act on (npm prints it) and,
for programs, fields such as `reason`, `rule`, `package`, `version`, `upstream`, `kind`.
Handlers raise `Refused` and the dispatcher answers it, so a refusal is one line anywhere; the
sentences of the gate's refusals are the gate's (`gate.refusals`), rendered by `Refused.of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from mirrorgate.errors import MirrorgateError
from mirrorgate.gate.refusals import Refusal

__all__ = ["Refused", "json_response", "reads_body"]

STATUS_TEXT_LIMIT = 300
"""Characters of a denial's reason carried in the status line (the body has all of it)."""


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
        self.refusal: Refusal | None = None
        """The gate's refusal this renders (`of`), which the pull log reads."""

    @classmethod
    def of(cls, refusal: Refusal) -> Refused:
        """The gate's refusal, to be answered as this request's JSON error."""
        refused = cls(refusal.status, refusal.message, reason=refusal.reason,
                      headers=refusal.headers, status_text=refusal.status_text,
                      brief_status_text=refusal.brief_status_text, **refusal.fields)
        refused.refusal = refusal
        return refused

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
