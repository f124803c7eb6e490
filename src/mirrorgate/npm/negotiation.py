"""How a request's headers choose what is sent: the form, the coding, the base URL, a 304.

These run on every warm request, so each answer is memoised per distinct header value in a
small bounded table (`Memo`; clients send a handful of distinct values).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from mirrorgate.errors import MirrorgateError
from mirrorgate.npm.packument import ABBREVIATED

__all__ = [
    "BadBaseError",
    "BaseUrls",
    "Memo",
    "accepts_gzip",
    "etag_matches",
    "vary",
    "wants_abbreviated",
]

# A host name or bracketed IP, optional port; anything else is a BadBaseError, since the value
# ends up inside every served document.
_HOST = re.compile(r"(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}\.?(?::[0-9]{1,5})?"
                   r"|\[[0-9A-Fa-f:.]{2,45}\](?::[0-9]{1,5})?")
_JSON_MEDIA = ("application/json", "application/*", "*/*")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """A bounded memo table: computed once per key, emptied when it reaches `limit`."""

    __slots__ = ("_compute", "_limit", "_table", "known")

    def __init__(self, compute: Callable[[K], V], limit: int = 4096) -> None:
        self._compute = compute
        self._limit = limit
        self._table: dict[K, V] = {}
        self.known: Callable[[K], V | None] = self._table.get
        """The value when it was computed, else None, computing nothing: the table's own
        `get`, so a hit runs no Python frame (the warm path's lookups)."""

    def __call__(self, key: K) -> V:
        try:
            return self._table[key]
        except KeyError:
            value = self._compute(key)
            if len(self._table) >= self._limit:
                self._table.clear()
            self._table[key] = value
            return value


def _q_value(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def wants_abbreviated(accept: str | None) -> bool:
    """Whether an Accept header asks for the abbreviated form (npm's install-v1): named
    explicitly, with a q-value above 0 and no lower than JSON's (`application/json`, else
    `application/*`, else `*/*`). npm's own header gets it; `*/*` alone gets the full form."""
    if not accept or ABBREVIATED not in accept.lower():
        return False
    abbreviated = 0.0
    json_q: dict[str, float] = {}
    for part in accept.split(",")[:64]:
        media, *params = part.split(";")
        media = media.strip().lower()
        q = _q_value(params)
        if media == ABBREVIATED:
            abbreviated = max(abbreviated, q)
        elif media in _JSON_MEDIA:
            json_q[media] = max(json_q.get(media, 0.0), q)
    for media in _JSON_MEDIA:
        if media in json_q:
            return abbreviated > 0.0 and abbreviated >= json_q[media]
    return abbreviated > 0.0


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip (`gzip`, `x-gzip` or `*`, q above 0)."""
    for part in header.split(",")[:32]:
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        key, _, value = params.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value.strip()) > 0
            except ValueError:
                return False
        return True
    return False


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-None-Match header matches `etag`: compared weakly (`W/` ignored on either
    side), and `*` matches, as RFC 9110 says for GET."""
    bare = etag.removeprefix("W/")
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == bare:
            return True
    return False


class BadBaseError(MirrorgateError, ValueError):
    """Headers that cannot make a base URL; `label` is the refusal metric's reason."""

    def __init__(self, label: str, message: str) -> None:
        super().__init__(message)
        self.label = label


BaseKey = tuple[str, str | None, str | None, str]


def _base_from(key: BaseKey) -> str:
    host_header, proto_header, forwarded_host, scheme = key
    proto = (proto_header or scheme or "http").split(",")[0].strip().lower()
    if proto not in ("http", "https"):
        raise BadBaseError("bad_forwarded_header",
                           f"X-Forwarded-Proto {proto_header!r} is not http or https")
    host = (forwarded_host or host_header or "").split(",")[0].strip()
    if _HOST.fullmatch(host) is None:
        raise BadBaseError("bad_host_header", "the Host (or X-Forwarded-Host) header is not "
                           "a host name; tarball URLs are built from it")
    return f"{proto}://{host}/"


def _memoised_base(key: BaseKey) -> str | BadBaseError:
    try:
        return _base_from(key)
    except BadBaseError as error:
        return error


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _forwarded(header: str | None) -> tuple[str | None, str | None]:
    """`proto` and `host` of the first element of an RFC 7239 `Forwarded` header."""
    if not header:
        return None, None
    proto = host = None
    for pair in header.split(",", 1)[0].split(";")[:16]:
        key, _, value = pair.partition("=")
        key, value = key.strip().lower(), value.strip().strip('"')
        if key == "proto":
            proto = value
        elif key == "host":
            host = value
    return proto, host


def _trusted_peer(networks: Sequence[Network]) -> Callable[[str], bool]:
    def trusted(peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer.partition("%")[0])
        except ValueError:  # a Unix socket or an unknown peer: never trusted
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in networks)
    return trusted


class BaseUrls:
    """The proxy's base URL as a client sees it (ending in `/`), from settings or headers.

    `MIRRORGATE_PUBLIC_URL` when set; else the connection's scheme and `Host`.
    `X-Forwarded-Proto`/`-Host` (first values), else `Forwarded`'s first `proto=`/`host=`, are
    believed only from a peer in `MIRRORGATE_TRUSTED_PROXIES`: from anyone else they would let
    a client choose the host in the tarball URLs served. How many bases one cached packument
    keeps is bounded beside the cache entry (`gate.packuments.entry`)."""

    def __init__(self, public_url: str | None, trusted: Sequence[Network] = ()) -> None:
        self.fixed = None if public_url is None else public_url.rstrip("/") + "/"
        self.trusts_proxies = bool(trusted)
        self._memo: Memo[BaseKey, str | BadBaseError] = Memo(_memoised_base)
        self._trusted: Memo[str, bool] = Memo(_trusted_peer(tuple(trusted)), limit=1024)

    def __call__(self, headers: Mapping[str, str], scheme: str, host: str,
                 peer: str | None = None) -> str:
        """The base for a request's headers, scheme and host (`Host`, or the socket's name
        when a client sent none); forwarded headers count only when `peer` is a trusted
        proxy. Raises BadBaseError when they cannot make a URL."""
        if self.fixed is not None:
            return self.fixed
        proto = forwarded_host = None
        if self.trusts_proxies and peer is not None and self._trusted(peer):
            proto = headers.get("X-Forwarded-Proto")
            forwarded_host = headers.get("X-Forwarded-Host")
            if proto is None and forwarded_host is None:
                proto, forwarded_host = _forwarded(headers.get("Forwarded"))
        base = self._memo((host, proto, forwarded_host, scheme))
        if isinstance(base, BadBaseError):
            raise base
        return base


def vary(*, fixed_base: bool, trusted_proxies: bool, authenticated: bool) -> str:
    """The `Vary` of a document that names tarball URLs: every header its bytes depend on
    (and Authorization when who asks decides whether it is served at all)."""
    names = ["Accept", "Accept-Encoding"]
    if not fixed_base:
        names.append("Host")
        if trusted_proxies:
            names += ["X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"]
    if authenticated:
        names.append("Authorization")
    return ", ".join(names)
