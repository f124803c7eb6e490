"""structlog set up once per process: JSON lines off a TTY, the console renderer on one.

Every line carries a stable `event` name an alert can match (`job_published`,
`upstream_failed`...); context such as the job's package, version and message id is bound with
`structlog.contextvars`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog

__all__ = ["MASK", "configure_logging", "loggable_url", "register_secret", "scrub"]

_SECRET_VALUES: set[str] = set()
_SECRET_KEYS = frozenset({"authorization", "token", "password", "secret", "_authtoken",
                          "private_token", "cookie"})
MASK = "**redacted**"


def register_secret(value: str) -> None:
    """Mask `value` in every log line from now on (values shorter than 6 characters are not
    masked: they would blank out ordinary words and are not worth having as tokens anyway)."""
    if len(value) >= 6:
        _SECRET_VALUES.add(value)


def scrub(value: Any) -> Any:
    """`value` with every registered secret masked, and credential-named keys of a mapping
    replaced: for what leaves the process other than a log line (a span, a notification)."""
    return _scrub(value)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        for secret in _SECRET_VALUES:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: MASK if str(k).lower() in _SECRET_KEYS else _scrub(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def loggable_url(url: str) -> str:
    """A URL fit for a log line: no user, password, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "(unparseable URL)"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Secrets are kept out twice over: keys that name credentials are replaced, and any
    registered secret value is masked wherever it appears in a string, so an upstream's error
    text that echoes a header cannot leak it."""
    for key in list(event):
        if key.lower() in _SECRET_KEYS:
            event[key] = MASK
        else:
            event[key] = _scrub(event[key])
    return event


def configure_logging(level: str = "info", fmt: str = "auto",
                      extra: Sequence[Any] = ()) -> None:
    """`extra`: processors run after the bound context is merged (`tracing.log_processors`:
    the trace and span ids of a line written inside a span)."""
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: Any = (structlog.dev.ConsoleRenderer() if console
                     else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *extra,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
