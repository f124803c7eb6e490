"""The settings each part reads, as small frozen slices of the whole `Settings`.

The loader builds one `Settings`; the composition roots (`process`, `__main__`, the commands'
setup, the tests' rigs) hand each part only its slice (`Settings.store`, `.gate`, `.serve`...),
so a module's signature says which variables it reads. A slice names each field as `Settings`
does (`Settings._cut` fills it by name). A field two parts read sits in both slices, or in
`CacheSettings`, which the slices that read the packument cache extend.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from mirrorgate.config.secrets import PasswordUrl, Secret, SecretUrl

PROVIDERS = ("memory", "sqs", "pubsub")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class NotifySettings:
    """Where security notifications go (`notify`); `url` None: nowhere."""

    url: SecretUrl | None = None
    secret: Secret | None = None


@dataclass(frozen=True)
class OidcSettings:
    """How CI ID tokens are verified (`access.oidc`): the audience they must carry and the time
    an issuer's keys may take to fetch."""

    audience: str = "mirrorgate"
    timeout: float = 5.0


@dataclass(frozen=True)
class QueueSettings:
    provider: str
    max_depth: int
    poll_wait: int
    visibility: int
    sqs_queue_url: str | None
    pubsub_topic: str | None
    pubsub_subscription: str | None
    job_key: Secret | None = None
    job_key_previous: Secret | None = None


@dataclass(frozen=True)
class StoreSettings:
    """Where the state store is (`store`): PostgreSQL at `database_url`, else SQLite under
    `data_dir` (whose older JSON files the first open imports)."""

    data_dir: Path
    database_url: PasswordUrl | None = None


@dataclass(frozen=True)
class UpstreamSettings:
    """The registries mirrorgate talks to and the clients' bounds (`upstream.clients`)."""

    public_upstream: str
    private_upstream: str
    mirror_target: str
    private_token: Secret | None
    upstream_timeout: float
    max_metadata_bytes: int
    pool_fills: int
    pool_tarballs: int
    pool_worker: int


@dataclass(frozen=True)
class CacheSettings:
    """The public packument cache's bounds (`gate.public`): shared by the gate's cache, serve's
    search memo (the TTL) and the worker's own cache, so their slices extend this one."""

    cache_ttl: float
    cache_max_entries: int
    cache_max_bytes: int


@dataclass(frozen=True)
class GateSettings(CacheSettings):
    """What the gate reads (`gate.assembled`): its cache, the release signals' bounds, and who
    a refusal names for an exception."""

    release_previous_max_bytes: int
    release_timeout: float
    operator_contact: str | None


@dataclass(frozen=True)
class IdentitySettings:
    """Who a client is and what it may read (`access`, serve's middleware and status page):
    the tokens file, the CI ID tokens' audience, the operators and the waiver granters."""

    client_tokens_file: Path | None
    metrics_open: bool
    oidc: OidcSettings
    operators: tuple[str, ...]
    waiver_granters: tuple[str, ...]


@dataclass(frozen=True)
class ServeSettings(CacheSettings):
    """What the HTTP application reads (`serve`): its base URL, its bounds on clients, the
    spool, publishing's limits; `operator_contact` and `max_metadata_bytes` also sit in the
    gate's and the upstreams' slices, since serve renders refusals and reads publishes."""

    public_url: str | None
    trusted_proxies: tuple[Network, ...]
    operator_contact: str | None
    data_dir: Path
    spool_max_bytes: int
    max_in_flight: int
    request_timeout: float
    head_timeout: float
    write_stall_timeout: float
    send_min_rate: int
    send_min_rate_grace: float
    max_publish_bytes: int
    max_metadata_bytes: int
    mirror_target: str
    identity: IdentitySettings
    secrets: tuple[Secret, ...]
    """Every secret mirrorgate holds (`Settings.secrets`): masked in an upstream's refusal
    quoted back to a publishing client, text the log scrubber never sees."""


@dataclass(frozen=True)
class ViaProxySettings:
    """How an operator command asks a running mirrorgate (`--proxy`, `commands.via_proxy`):
    the token it sends and the bounds the upstreams' clients have too."""

    proxy_token: Secret | None
    upstream_timeout: float
    max_metadata_bytes: int


@dataclass(frozen=True)
class LogSettings:
    """How a process or a command logs (`logs.configure_logging`), and the secrets the
    scrubber masks in every line (`Settings.secrets`)."""

    log_level: str
    log_format: str
    secrets: tuple[Secret, ...]


@dataclass(frozen=True)
class WorkerSettings(CacheSettings):
    """What the mirror worker reads (`worker`): its concurrency and retries, the tarballs'
    bound, the drain, and the queue's window (`QueueSettings`, the backends' slice too)."""

    queue: QueueSettings
    max_deliveries: int
    max_tarball_bytes: int
    worker_concurrency: int
    drain_timeout: float
