"""Which URLs mirrorgate may fetch: only the configured upstream's own origin.

A packument's `dist.tarball` is a URL someone else chose; followed blindly, a hostile packument
could make the proxy or the worker fetch from an internal service (a cloud metadata address,
a private network's) or another host.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from mirrorgate.errors import MirrorgateError

__all__ = ["Origin", "OriginRefusal", "check_on_origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMERIC_HOST = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}", re.IGNORECASE)
_PLAIN_HOST = re.compile(r"[a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        return cls(scheme, host, port)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


class OriginRefusal(MirrorgateError, ValueError):  # noqa: N818 - a refusal is an outcome, logged, not a bug
    """Why a URL may not be fetched; `kind` is a stable label for logs and metrics."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def _internal_literal(host: str) -> bool:
    candidate = host.strip("[]")
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        # an octal, hex or integer spelling of an IPv4 address (C's inet_aton accepts them) is
        # never a legitimate host
        return _NUMERIC_HOST.fullmatch(candidate) is not None
    return not address.is_global


@functools.lru_cache(maxsize=64)
def _prefixes(origin: Origin) -> tuple[str, ...]:
    """Beginnings of a URL that `urlsplit` can only read as `origin`: its scheme, its host,
    its port (or none, for the scheme's default) and the `/` that ends the authority. None for
    a host that is not plain letters, digits, dots and dashes (an IPv6 literal, say)."""
    if origin.scheme not in _DEFAULT_PORTS or _PLAIN_HOST.fullmatch(origin.host) is None:
        return ()
    found = [f"{origin.scheme}://{origin.host}:{origin.port}/"]
    if origin.port == _DEFAULT_PORTS[origin.scheme]:
        found.append(f"{origin.scheme}://{origin.host}/")
    return tuple(found)


def check_on_origin(url: str, origin: Origin) -> None:
    """Raise OriginRefusal unless `url` is an http(s) URL on exactly `origin` (scheme, host and
    port as the upstream was configured). The refusal's `kind` tells the log whether it was
    another host, an internal address literal or a non-http scheme."""
    # The gate asks this of every version of every packument: a URL that begins with the
    # origin's own authority is on it without a parse (urlsplit would read just that).
    if url.startswith(_prefixes(origin)):
        return
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise OriginRefusal("malformed", f"the URL cannot be parsed: {error}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise OriginRefusal("scheme", f"the URL's scheme {scheme or '(none)'!r} is not http(s)")
    if parts.username is not None or parts.password is not None:
        raise OriginRefusal("credentials", "the URL carries credentials")
    host = (parts.hostname or "").lower()
    if not host:
        raise OriginRefusal("malformed", "the URL has no host")
    here = Origin(scheme, host, port or _DEFAULT_PORTS[scheme])
    if here == origin:
        return
    if _internal_literal(host):
        raise OriginRefusal("internal-address",
                            f"the URL points at the internal address literal {host!r}, "
                            f"not at the upstream {origin}")
    raise OriginRefusal("off-origin", f"the URL is on {here}, not on the upstream {origin}")
