"""Environment variables into one frozen `Settings`, validated once at start-up.

Every variable is declared once in `VARIABLES`; `--help`, `check-config` and
docs/configuration.md (`configdoc`) are generated from it, so the list a person reads cannot
drift from the list the code reads.
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mirrorgate.errors import MirrorgateError

__all__ = [
    "VARIABLES",
    "ConfigError",
    "NotifySettings",
    "OidcSettings",
    "PasswordUrl",
    "QueueSettings",
    "Secret",
    "SecretUrl",
    "Settings",
    "load_settings",
    "npm_configured_registry",
    "unknown_variables",
]

PROVIDERS = ("memory", "sqs", "pubsub")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MIB = 1024 * 1024


PROXY = "proxy"
"""Read where `mirrorgate serve` answers clients."""
WORKER = "worker"
"""Read by the mirror worker: `mirrorgate worker`, and `mirrorgate serve` with its in-process
worker."""
COMMANDS = "commands"
"""Read by the operator commands (`mirrorgate check`...), never by a running proxy or worker."""


OSV_NPM_EXPORT = "https://osv-vulnerabilities.storage.googleapis.com/npm/all.zip"
"""OSV's public export of the npm ecosystem: the default source of known malware (its `MAL-`
records), fetched at start-up and hourly with conditional requests (docs/serving.md#known-
malware-by-default)."""

SQS_URL_HINT = ("set it to the QueueUrl that `aws sqs get-queue-url --queue-name mirrorgate` "
                "prints (docs/queues.md#amazon-sqs)")
"""What to do about a missing MIRROR_SQS_QUEUE_URL, said once for config and the backend."""


@dataclass(frozen=True)
class Var:
    name: str
    default: str | None
    help: str
    secret: bool = False
    # Which side reads it (docs/configuration.md is rendered from these fields by
    # `mirrorgate.configdoc`), and the docs/ page and section that explain it further.
    read_by: tuple[str, ...] = (PROXY, WORKER)
    see: str | None = None


VARIABLES: tuple[Var, ...] = (
    Var("MIRROR_QUEUE_PROVIDER", "memory", "queue backend: memory (in process), sqs or pubsub",
        see="queues.md"),
    Var("MIRROR_QUEUE_MAX_DEPTH", "10000", "jobs the memory queue (or a network backend's send "
        "buffer) holds before it drops the newest",
        see="queues.md#memory"),
    Var("MIRROR_POLL_WAIT_SECONDS", "20", "longest a receive waits for a job (1..20)",
        read_by=(WORKER,), see="queues.md"),
    Var("MIRROR_VISIBILITY_SECONDS", "60", "how long the worker holds a job in flight before it "
        "must extend it again (10..600)",
        read_by=(WORKER,), see="worker.md#retries"),
    Var("MIRROR_SQS_QUEUE_URL", None, "SQS queue URL (MIRROR_QUEUE_PROVIDER=sqs); also reads "
        "AWS_REGION, AWS_ENDPOINT_URL_SQS and the default AWS credential chain",
        see="queues.md#amazon-sqs"),
    Var("MIRROR_PUBSUB_TOPIC", None, "Pub/Sub topic projects/P/topics/T to publish jobs to "
        "(MIRROR_QUEUE_PROVIDER=pubsub); honours PUBSUB_EMULATOR_HOST",
        see="queues.md#google-pubsub"),
    Var("MIRROR_PUBSUB_SUBSCRIPTION", None, "Pub/Sub subscription projects/P/subscriptions/S "
        "the worker pulls from",
        see="queues.md#google-pubsub"),
    Var("MIRRORGATE_JOB_KEY", None, "secret (32+ characters) the proxy signs jobs with and the "
        "worker requires (HMAC-SHA256; sqs and pubsub); the same value on both", secret=True,
        see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_FILE", None, "file holding that key (a mounted Secret)",
        see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_PREVIOUS", None, "the key being rotated out: the worker still "
        "accepts jobs signed with it", secret=True,
        read_by=(WORKER,), see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_PREVIOUS_FILE", None, "file holding the previous key",
        read_by=(WORKER,), see="queues.md#signed-jobs"),
    Var("MIRRORGATE_LISTEN", "127.0.0.1:8080", "host:port the proxy listens on",
        read_by=(PROXY,)),
    Var("MIRRORGATE_WORKER_LISTEN", "127.0.0.1:8081", "host:port of `mirrorgate worker`'s "
        "/livez, /readyz and /metrics",
        read_by=(WORKER,), see="operations.md#health"),
    Var("MIRRORGATE_PUBLIC_URL", None, "mirrorgate's external root URL, e.g. "
        "https://npm.example.com/ (tarball URLs become .../npm/<name>/-/<file>; default: from "
        "the request's Host, or X-Forwarded-* from MIRRORGATE_TRUSTED_PROXIES)",
        read_by=(PROXY,), see="serving.md#headers-from-clients-the-base-url"),
    Var("MIRRORGATE_PUBLIC_UPSTREAM", None, "the public npm registry URL (default: the registry "
        "npm is configured with)"),
    Var("MIRRORGATE_PRIVATE_UPSTREAM", None, "the organisation's npm registry URL (http(s)://) or "
        "an embedded store (file:///path); default: file store under MIRRORGATE_DATA_DIR",
        see="serving.md#the-private-upstream"),
    Var("MIRRORGATE_PRIVATE_TOKEN", None, "bearer token for the private upstream and mirror "
        "target", secret=True,
        see="serving.md#the-private-upstream"),
    Var("MIRRORGATE_PRIVATE_TOKEN_FILE", None, "file holding that token (a mounted Secret)",
        see="deployment.md#what-to-set"),
    Var("MIRRORGATE_MIRROR_TARGET", None, "where the worker publishes (default: the private "
        "upstream)",
        read_by=(WORKER,), see="worker.md"),
    Var("MIRRORGATE_DATA_DIR", None, "where mirrorgate remembers the names it learned are "
        "first-party and the versions it saw the public registry withdraw, and the embedded "
        "file store's home; keep it on a volume that outlives the process (default: "
        "$XDG_DATA_HOME/mirrorgate, else ~/.local/share/mirrorgate)",
        see="withdrawals.md#what-mirrorgate-remembers"),
    Var("MIRRORGATE_DATABASE_URL", None, "PostgreSQL URL of the state store a fleet shares "
        "(postgresql://user:password@host:5432/mirrorgate; needs the postgres extra); unset: "
        "the embedded SQLite file MIRRORGATE_DATA_DIR/state.sqlite3, for one replica and its "
        "sidecar", secret=True, see="state-store.md"),
    Var("MIRRORGATE_DATABASE_URL_FILE", None, "file holding that URL (a mounted Secret)",
        see="state-store.md"),
    Var("MIRRORGATE_PULL_LOG_RETENTION", "90", "days the pull log (who pulled which tarball, "
        "for `mirrorgate exposure`) keeps a record (1..3650)", read_by=(PROXY, COMMANDS),
        see="exposure.md"),
    Var("MIRRORGATE_PULL_LOG_MAX_RECORDS", "10000000", "records the pull log keeps at most "
        "(served pulls, and refusals counted per client, version, rule and hour), the whole "
        "fleet's together; past it the oldest go, refusal counts first (1,000..1,000,000,000; "
        "about 470 bytes a record on SQLite, 555 on PostgreSQL)", read_by=(PROXY,),
        see="exposure.md"),
    Var("MIRRORGATE_RULES_FILE", None, "TOML file of admission rules, read again when it "
        "changes; a rewrite that is missing, empty or cut short keeps the rules in force, so "
        "only unsetting this means no rules file (default: the default policy, stated below "
        "the table)",
        see="serving.md#admission-rules"),
    Var("MIRRORGATE_MALWARE_FEED", OSV_NPM_EXPORT, "where known malware comes from when the "
        "rules file has no [advisories] table: the MAL- records of an OSV npm export, as an "
        "https URL of its zip, a path to a copy (a zip or a directory of records), or off",
        read_by=(PROXY, WORKER, COMMANDS), see="serving.md#known-malware-by-default"),
    Var("MIRRORGATE_OPERATOR_CONTACT", None, "who a person asks for an exception to the "
        "admission rules (an address, a channel, a URL), named in every refusal a client "
        "prints (default: \"mirrorgate's operator\")",
        read_by=(PROXY,), see="serving.md#what-each-client-prints-for-a-denied-version"),
    Var("MIRRORGATE_WAIVER_GRANTERS", None, "clients of MIRRORGATE_CLIENT_TOKENS_FILE, by name, "
        "comma-separated, who may grant and revoke waivers from the status page once signed "
        "in (default: none; `mirrorgate allow` run where the state store is reachable always "
        "can)", read_by=(PROXY,), see="serving.md#waivers-mirrorgate-allow"),
    Var("MIRRORGATE_OPERATORS", None, "clients of MIRRORGATE_CLIENT_TOKENS_FILE, by name, "
        "comma-separated, who read every client's pulls on the status page (who pulled which "
        "version, when, how often); any other client reads its own. A client "
        "MIRRORGATE_WAIVER_GRANTERS names is one too; a CI job's ID token never is (default: "
        "none)", read_by=(PROXY,), see="operations.md#status-page"),
    Var("MIRRORGATE_CLIENT_TOKENS_FILE", None, "file of client tokens, one `NAME sha256:HEX` a "
        "line; when set, every /npm/ request needs one of them (default: open, access control "
        "is the network's job)",
        see="serving.md#who-may-use-it"),
    Var("MIRRORGATE_PROXY_TOKEN", None, "client token the operator commands (`mirrorgate check "
        "--proxy URL`...) send to a running mirrorgate that requires one", secret=True,
        read_by=(COMMANDS,), see="operations-commands.md"),
    Var("MIRRORGATE_PROXY_TOKEN_FILE", None, "file holding that token",
        read_by=(COMMANDS,), see="operations-commands.md"),
    Var("MIRRORGATE_METRICS_OPEN", "false", "true: /metrics answers without a client token "
        "when MIRRORGATE_CLIENT_TOKENS_FILE is set",
        see="serving.md#client-tokens"),
    Var("MIRRORGATE_OIDC_AUDIENCE", "mirrorgate", "audience (`aud`) a CI's ID token must be "
        "issued for to sign in through an issuer line of the tokens file",
        read_by=(PROXY,), see="ci-identity.md"),
    Var("MIRRORGATE_OIDC_TIMEOUT", "5", "seconds an issuer's discovery document and keys may "
        "take to fetch; past it that issuer's tokens are refused (503), other requests untouched",
        read_by=(PROXY,), see="ci-identity.md"),
    Var("MIRRORGATE_TRUSTED_PROXIES", None, "addresses and CIDRs (comma-separated) whose "
        "X-Forwarded-Proto, X-Forwarded-Host and Forwarded headers are believed",
        read_by=(PROXY,), see="serving.md#headers-from-clients-the-base-url"),
    Var("MIRRORGATE_CACHE_TTL", "60", "seconds a fetched packument is served before it is "
        "revalidated upstream",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_CACHE_MAX_ENTRIES", "5000", "packuments held in the metadata cache",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_CACHE_MAX_BYTES", str(512 * MIB), "bytes the metadata cache may hold",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_MAX_METADATA_BYTES", str(32 * MIB), "largest packument body read from an "
        "upstream",
        see="serving.md#caching"),
    Var("MIRRORGATE_MAX_TARBALL_BYTES", str(256 * MIB), "largest tarball the worker mirrors",
        read_by=(WORKER,), see="worker.md#what-the-worker-checks-in-order"),
    Var("MIRRORGATE_MAX_PUBLISH_BYTES", str(100 * MIB), "largest `npm publish` body a client "
        "may send through the proxy (refused with 413 as soon as it is crossed)",
        read_by=(PROXY,), see="publishing.md#what-is-checked-in-a-publish"),
    Var("MIRRORGATE_UPSTREAM_TIMEOUT", "30", "seconds an upstream call may take (connect and "
        "each read)"),
    Var("MIRRORGATE_REQUEST_TIMEOUT", "60", "seconds a client request may take before 504",
        read_by=(PROXY,)),
    Var("MIRRORGATE_POOL_FILLS", "32", "connections per upstream for serve-path packument "
        "fills (their own pool: tarball streams and the worker cannot take them)",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_POOL_TARBALLS", "64", "connections per upstream for serve-path tarball "
        "streams",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_POOL_WORKER", "8", "connections per upstream for the mirror worker (at "
        "least MIRRORGATE_WORKER_CONCURRENCY)",
        read_by=(WORKER,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_MAX_IN_FLIGHT", None, "requests doing upstream work at once (packument "
        "misses, versions, tarballs; warm cache hits are not counted); past it a request waits "
        "up to 1 s, then gets 503 with Retry-After (default: 64 per CPU core, at least 64)",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_HEAD_TIMEOUT", "10", "seconds a client may take to send a complete request "
        "head (from connecting, or from the first byte of a later request)",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_KEEPALIVE_TIMEOUT", "75", "seconds an idle keep-alive connection is kept "
        "open",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_WRITE_STALL_TIMEOUT", "30", "seconds a response may stay blocked on a "
        "client that stopped reading before the connection is cut",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SEND_MIN_RATE", "500", "bytes a second a client must take a tarball at, "
        "measured over each 5 s once the grace has passed, or the connection is cut (Apache's "
        "MinRate, for responses; 0 turns it off)",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SEND_MIN_RATE_GRACE", "20", "seconds from a tarball response's first byte "
        "before MIRRORGATE_SEND_MIN_RATE applies",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SPOOL_MAX_BYTES", None, "bytes of tarballs being read that the spools may "
        "hold at once, those up to 4 MiB in memory (64 MiB at most), the rest in files under "
        "MIRRORGATE_DATA_DIR/spool; a tarball that does not fit streams per request (default: "
        "a quarter of the free space there, at most 1 GiB)",
        see="serving.md#one-download-per-tarball"),
    Var("MIRRORGATE_HANDOFF_MAX_BYTES", None, "bytes of public tarballs the proxy verified "
        "that it keeps, in unnamed files under MIRRORGATE_DATA_DIR/handoff for at most 10 "
        "minutes, for the worker beside it (`mirrorgate serve` with its worker) to mirror "
        "without downloading them again, with the digest they matched (the worker checks the "
        "bytes read back with the sha1 it publishes) "
        "(0: the worker downloads every one; default: a quarter of the free space there, at "
        "most 1 GiB)",
        read_by=(PROXY,), see="serving.md#one-download-per-version"),
    Var("MIRRORGATE_RELEASE_PREVIOUS_MAX_BYTES", str(64 * 1024 * 1024), "bytes of the "
        "previous version's tarball the release signals fetch at most to compare a first pull "
        "with; a larger one is the publisher's doing, and the version is refused as "
        "unreadable-release", read_by=(PROXY,), see="serving.md#release-signals-causes"),
    Var("MIRRORGATE_RELEASE_TIMEOUT", "20", "seconds the release signals may take to fetch "
        "the previous version's tarball, and to look up each new dependency; past it the "
        "version is unchecked (release.unavailable decides)",
        read_by=(PROXY,), see="serving.md#release-signals"),
    Var("MIRRORGATE_MAX_DELIVERIES", "5", "deliveries after which a job is retired",
        read_by=(WORKER,), see="worker.md#retries"),
    Var("MIRRORGATE_WORKER_CONCURRENCY", "1", "mirror jobs in flight at once",
        read_by=(WORKER,), see="worker.md"),
    Var("MIRRORGATE_HEARTBEAT_STALE_AFTER", "120", "seconds without a worker heartbeat before "
        "/livez answers 503",
        read_by=(WORKER,), see="operations.md#health"),
    Var("MIRRORGATE_DRAIN_TIMEOUT", "30", "seconds in-flight work may take to finish after "
        "SIGTERM",
        see="operations.md#health"),
    Var("MIRRORGATE_NOTIFY_URL", None, "webhook the security events are POSTed to as "
        "CloudEvents JSON with a one-line `text` (a Slack or Teams incoming webhook, an "
        "incident tool); kept secret, since such URLs carry their own token", secret=True,
        see="operations.md#notifications"),
    Var("MIRRORGATE_NOTIFY_SECRET", None, "secret (32+ characters) the notifications are "
        "signed with: HMAC-SHA256 of the body in X-Mirrorgate-Signature", secret=True,
        see="operations.md#notifications"),
    Var("MIRRORGATE_NOTIFY_SECRET_FILE", None, "file holding that secret (a mounted Secret)",
        see="operations.md#notifications"),
    Var("MIRRORGATE_LOG_LEVEL", "info", "debug, info, warning or error",
        see="operations.md#log-events"),
    Var("MIRRORGATE_EVENT_LOOP", "auto", "the event loop: uvloop, asyncio (the standard "
        "library's) or auto (uvloop when it is installed)",
        see="serving.md#the-runtime"),
    Var("MIRRORGATE_LOG_FORMAT", "auto", "json, console or auto (console on a TTY)",
        see="operations.md#log-events"),
)
_BY_NAME = {var.name: var for var in VARIABLES}
OWN_PREFIXES = ("MIRRORGATE_", "MIRROR_")
"""Variables with these prefixes are mirrorgate's; one it does not read is most likely a typo
(`MIRRORGATE_RULE_FILE`) that would otherwise be ignored in silence."""


@dataclass(frozen=True)
class UnknownVariable:
    name: str
    suggestion: str | None

    def warning(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return (f"{self.name} is set but mirrorgate does not read it{hint} "
                "(`mirrorgate --help` lists every variable)")


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[UnknownVariable]:
    """The MIRRORGATE_* and MIRROR_* variables in the environment that no setting reads, each
    with the closest known name when there is one, sorted by name."""
    env = os.environ if environ is None else environ
    found = []
    for name in sorted(env):
        if not name.startswith(OWN_PREFIXES) or name in _BY_NAME:
            continue
        close = difflib.get_close_matches(name, list(_BY_NAME), n=1, cutoff=0.75)
        found.append(UnknownVariable(name, close[0] if close else None))
    return found


class Secret:
    """A value that must never be printed; its repr and str say so instead, so a settings
    object can be logged or printed without leaking a token or key."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**redacted**')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretUrl(Secret):
    """A URL whose path is a credential (an incoming webhook's): shown as its origin only."""

    __slots__ = ()

    def shown(self) -> str:
        parts = urlsplit(self.reveal())
        port = f":{parts.port}" if parts.port is not None else ""
        return f"{parts.scheme}://{parts.hostname}{port}/**redacted**"


class PasswordUrl(Secret):
    """A URL whose password is the secret (a database's): shown with the password replaced."""

    __slots__ = ()

    def shown(self) -> str:
        scheme, sep, rest = self.reveal().partition("://")
        userinfo, at, host = rest.rpartition("@")
        if not at or ":" not in userinfo:
            return self.reveal()
        return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:**redacted**@{host}"


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
class Settings:
    queue: QueueSettings
    listen: tuple[str, int]
    worker_listen: tuple[str, int]
    public_url: str | None
    public_upstream: str
    private_upstream: str
    private_token: Secret | None
    mirror_target: str
    data_dir: Path
    rules_file: Path | None
    client_tokens_file: Path | None
    metrics_open: bool
    trusted_proxies: tuple[Network, ...]
    cache_ttl: float
    cache_max_entries: int
    cache_max_bytes: int
    max_metadata_bytes: int
    max_tarball_bytes: int
    max_publish_bytes: int
    upstream_timeout: float
    request_timeout: float
    max_deliveries: int
    worker_concurrency: int
    pool_fills: int
    pool_tarballs: int
    pool_worker: int
    max_in_flight: int
    head_timeout: float
    keepalive_timeout: float
    write_stall_timeout: float
    send_min_rate: int
    send_min_rate_grace: float
    spool_max_bytes: int
    handoff_max_bytes: int
    release_previous_max_bytes: int
    release_timeout: float
    heartbeat_stale_after: float
    drain_timeout: float
    log_level: str
    log_format: str
    event_loop: str = "auto"
    operator_contact: str | None = None
    """MIRRORGATE_OPERATOR_CONTACT: named in refusals as who grants an exception."""
    waiver_granters: tuple[str, ...] = ()
    """MIRRORGATE_WAIVER_GRANTERS: the signed-in clients the status page's waiver forms serve
    (a client token is npm's, so no client grants by default: a CI job's token must not waive
    what its own build was refused)."""
    operators: tuple[str, ...] = ()
    """MIRRORGATE_OPERATORS: the clients who read every client's pulls on the status page
    (`serve.ui.readers`); the waiver granters are operators too."""
    proxy_token: Secret | None = None
    """The client token `--proxy` commands send; the proxy itself never reads it."""
    notify: NotifySettings = NotifySettings()
    oidc: OidcSettings = OidcSettings()
    database_url: PasswordUrl | None = None
    """The PostgreSQL state store (`store`); None: the SQLite file under `data_dir`."""
    pull_log_retention_days: int = 90
    """MIRRORGATE_PULL_LOG_RETENTION: how long the pull log keeps a record."""
    malware_feed: str | None = None
    """MIRRORGATE_MALWARE_FEED: the known-malware source the rules use when the rules file
    names none (an https URL or a path); None: off."""
    pull_log_max_records: int = 10_000_000
    """MIRRORGATE_PULL_LOG_MAX_RECORDS: how many records the pull log keeps at most."""

    def secrets(self) -> tuple[Secret, ...]:
        """Every secret these settings hold, for the log scrubber (`logs.register_secret`);
        a webhook URL's path too, since an error could quote it without its host."""
        held = (self.private_token, self.queue.job_key, self.queue.job_key_previous,
                self.proxy_token, self.notify.url, self.notify.secret, self.database_url)
        found = [secret for secret in held if secret is not None]
        if self.database_url is not None:  # a driver's error may quote the password alone
            password = urlsplit(self.database_url.reveal()).password
            if password:
                found.append(Secret(password))
        if self.notify.url is not None:
            path = urlsplit(self.notify.url.reveal()).path
            if len(path) >= WEBHOOK_TOKEN_PATH:
                found.append(Secret(path))
        return tuple(found)

    @property
    def root_url(self) -> str:
        """Where a person reaches the proxy: MIRRORGATE_PUBLIC_URL, else the listen address
        (a wildcard one by this machine's name), ending in `/`."""
        if self.public_url is not None:
            return self.public_url if self.public_url.endswith("/") else self.public_url + "/"
        host, port = self.listen
        if host in ("", "0.0.0.0", "::"):  # a wildcard: the machine's name reaches it
            host = socket.gethostname()
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def registry_url(self) -> str:
        """The registry URL to give npm (`--registry`, `.npmrc`)."""
        return self.root_url + "npm/"

    @property
    def status_url(self) -> str:
        """The status page's address."""
        return self.root_url + "ui/"

    def warnings(self) -> list[str]:
        """What these settings allow that an operator should know is risky: each a sentence
        naming the setting to change. Printed by check-config, logged at start-up
        (`config_warning`); none stops the process."""
        found: list[str] = []
        if self.client_tokens_file is not None and self.public_url is None:
            found.append("MIRRORGATE_CLIENT_TOKENS_FILE is set but MIRRORGATE_PUBLIC_URL is "
                         "not: tarball URLs are built from each request's Host header, so "
                         "renderings are kept only for the first few hosts seen; set "
                         "MIRRORGATE_PUBLIC_URL to the URL clients use")
        if (self.database_url is None and not self.private_upstream.startswith("file://")
                and not _writable(self.data_dir)):
            found.append(f"MIRRORGATE_DATA_DIR ({self.data_dir}) cannot be written: the state "
                         "store (state.sqlite3, the names learned first-party and the versions "
                         "seen withdrawn) cannot be kept there, so /readyz stays 503; mount a "
                         "writable volume at MIRRORGATE_DATA_DIR (as deploy/kubernetes does), "
                         "or set MIRRORGATE_DATABASE_URL (docs/state-store.md)")
        return found

    def summary(self) -> dict[str, Any]:
        """The resolved settings as plain values, secrets redacted, for check-config."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, QueueSettings | NotifySettings | OidcSettings):
                for sub in fields(value):
                    inner = getattr(value, sub.name)
                    if isinstance(inner, SecretUrl):
                        inner = inner.shown()
                    elif isinstance(inner, Secret):
                        inner = "**redacted**"
                    out[f"{item.name}.{sub.name}"] = inner
                continue
            if isinstance(value, PasswordUrl):
                value = value.shown()
            elif isinstance(value, Secret):
                value = "**redacted**"
            elif isinstance(value, Path):
                value = str(value)
            elif item.name == "trusted_proxies":
                value = [str(network) for network in value]
            elif item.name in ("waiver_granters", "operators"):
                value = list(value)
            elif isinstance(value, tuple):
                value = f"{value[0]}:{value[1]}"
            out[item.name] = value
        return out


class ConfigError(MirrorgateError):
    """Every problem found in the environment (collected, not raised one at a time), each a
    sentence naming the variable, what is wrong with the value and an example of a good one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def npm_configured_registry() -> str | None:
    """The registry npm itself would use, or None when npm is absent or says nothing."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        done = subprocess.run(
            [npm, "config", "get", "registry"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value.startswith(("http://", "https://")) else None


class _Reader:
    """Reads variables from one environment, collecting problems instead of raising."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return _BY_NAME[name].default
        return value.strip()

    def problem(self, name: str, text: str) -> None:
        self.problems.append(f"{name}: {text}")

    def integer(self, name: str, low: int, high: int | None, example: str) -> int:
        text = self.raw(name) or "0"
        try:
            value = int(text)
        except ValueError:
            self.problem(name, f"{text!r} is not a whole number; set it like {name}={example}")
            return int(_BY_NAME[name].default or 0)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            self.problem(name, f"{value} is out of range; it must be {bound}, "
                         f"e.g. {name}={example}")
            return int(_BY_NAME[name].default or 0)
        return value

    def seconds(self, name: str, low: float, example: str) -> float:
        text = self.raw(name) or "0"
        try:
            value = float(text)
        except ValueError:
            self.problem(name, f"{text!r} is not a number of seconds; e.g. {name}={example}")
            return float(_BY_NAME[name].default or 0)
        if not value >= low or value == float("inf"):
            self.problem(name, f"{text} must be a finite number of seconds >= {low}; "
                         f"e.g. {name}={example}")
            return float(_BY_NAME[name].default or 0)
        return value

    def address(self, name: str) -> tuple[str, int]:
        text = self.raw(name) or ""
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            self.problem(name, f"{text!r} is not host:port; e.g. {name}=0.0.0.0:8080")
            default = _BY_NAME[name].default or "127.0.0.1:0"
            host, _, port = default.rpartition(":")
        return host, int(port)

    def url(self, name: str, value: str | None, schemes: tuple[str, ...]) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in schemes or (parts.scheme != "file" and not parts.hostname):
            allowed = " or ".join(f"{s}://" for s in schemes)
            self.problem(name, f"{value!r} is not a {allowed} URL; e.g. "
                         f"{name}=https://registry.example.com/")
            return None
        if parts.username or parts.password:
            self.problem(name, "credentials in the URL are refused (they would end up in logs); "
                         "use MIRRORGATE_PRIVATE_TOKEN or MIRRORGATE_PRIVATE_TOKEN_FILE")
            return None
        if parts.scheme == "file":
            return "file://" + parts.path.rstrip("/")
        return value if value.endswith("/") else value + "/"

    def flag(self, name: str) -> bool:
        value = (self.raw(name) or "false").lower()
        if value not in ("true", "false"):
            self.problem(name, f"{value!r} is not true or false; e.g. {name}=true")
        return value == "true"

    def networks(self, name: str) -> tuple[Network, ...]:
        found: list[Network] = []
        for item in (self.raw(name) or "").replace(",", " ").split():
            try:
                found.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self.problem(name, f"{item!r} is not an IP address or CIDR; e.g. "
                             f"{name}=10.0.0.0/8,192.0.2.7")
        return tuple(found)

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        value = (self.raw(name) or "").lower()
        if value not in allowed:
            self.problem(name, f"{value!r} is not one of {', '.join(allowed)}; "
                         f"e.g. {name}={allowed[0]}")
            return _BY_NAME[name].default or allowed[0]
        return value


def _event_loop(read: _Reader) -> str:
    choice = read.choice("MIRRORGATE_EVENT_LOOP", ("auto", "uvloop", "asyncio"))
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        read.problem("MIRRORGATE_EVENT_LOOP", "uvloop is not installed; install it (pip "
                     "install uvloop) or set MIRRORGATE_EVENT_LOOP=auto")
    return choice


def _contact(read: _Reader) -> str | None:
    text = read.raw("MIRRORGATE_OPERATOR_CONTACT")
    # it goes into the 403 status line pnpm and yarn 4 print, and a terminal: one printable line
    if text is not None and (len(text) > 120 or any(not " " <= c <= "~" for c in text)):
        read.problem("MIRRORGATE_OPERATOR_CONTACT", "must be one line of at most 120 printable "
                     "ASCII characters, e.g. MIRRORGATE_OPERATOR_CONTACT=#npm-gate on chat")
        return None
    return text


def _queue(read: _Reader) -> QueueSettings:
    provider = (read.raw("MIRROR_QUEUE_PROVIDER") or "memory").lower()
    if provider not in PROVIDERS:
        read.problem("MIRROR_QUEUE_PROVIDER", f"unknown provider {provider!r}; valid providers "
                     f"are {', '.join(PROVIDERS)} (e.g. MIRROR_QUEUE_PROVIDER=memory)")
    queue = QueueSettings(
        provider=provider,
        max_depth=read.integer("MIRROR_QUEUE_MAX_DEPTH", 1, None, "10000"),
        poll_wait=read.integer("MIRROR_POLL_WAIT_SECONDS", 1, 20, "20"),
        visibility=read.integer("MIRROR_VISIBILITY_SECONDS", 10, 600, "60"),
        sqs_queue_url=read.raw("MIRROR_SQS_QUEUE_URL"),
        pubsub_topic=read.raw("MIRROR_PUBSUB_TOPIC"),
        pubsub_subscription=read.raw("MIRROR_PUBSUB_SUBSCRIPTION"),
        job_key=_job_key(read, "MIRRORGATE_JOB_KEY"),
        job_key_previous=_job_key(read, "MIRRORGATE_JOB_KEY_PREVIOUS"),
    )
    if queue.job_key_previous is not None and queue.job_key is None:
        read.problem("MIRRORGATE_JOB_KEY_PREVIOUS", "is set without MIRRORGATE_JOB_KEY; during "
                     "a rotation set the new key as MIRRORGATE_JOB_KEY and the old one here")
    if provider == "sqs" and not queue.sqs_queue_url:
        read.problem("MIRROR_SQS_QUEUE_URL", "is required with MIRROR_QUEUE_PROVIDER=sqs; "
                     f"{SQS_URL_HINT}")
    if provider == "pubsub":
        for name, kind in (("MIRROR_PUBSUB_TOPIC", "topics"),
                           ("MIRROR_PUBSUB_SUBSCRIPTION", "subscriptions")):
            value = read.raw(name)
            parts = (value or "").split("/")
            if len(parts) != 4 or parts[0] != "projects" or parts[2] != kind or not all(parts):
                shown = "is required" if not value else f"{value!r} is not projects/P/{kind}/NAME"
                read.problem(name, f"{shown} with MIRROR_QUEUE_PROVIDER=pubsub; "
                             f"e.g. {name}=projects/my-project/{kind}/mirrorgate")
    return queue


def _secret(read: _Reader, name: str, what: str) -> Secret | None:
    """`name` or `name`_FILE (not both), as a Secret; None when neither is set."""
    value = read.raw(name)
    path = read.raw(f"{name}_FILE")
    if value and path:
        read.problem(f"{name}_FILE", f"set either {name} or {name}_FILE, not both")
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as error:
            read.problem(f"{name}_FILE", f"cannot read {path}: {error.strerror}; point it at "
                         f"a readable file holding the {what}")
            return None
        if not value:
            read.problem(f"{name}_FILE", f"{path} is empty")
            return None
    if value and any(ord(c) < 33 or ord(c) == 127 for c in value):
        read.problem(name, f"the {what} holds whitespace or control characters; set the bare "
                     f"{what}")
        return None
    return Secret(value) if value else None


def _token(read: _Reader) -> Secret | None:
    return _secret(read, "MIRRORGATE_PRIVATE_TOKEN", "token")


JOB_KEY_MIN = 32


def _job_key(read: _Reader, name: str) -> Secret | None:
    key = _secret(read, name, "key")
    if key is not None and len(key.reveal()) < JOB_KEY_MIN:
        # the length only, never the value
        read.problem(name, f"the key is {len(key.reveal())} characters; use at least "
                     f"{JOB_KEY_MIN}, e.g. the output of `openssl rand -base64 48`")
        return None
    return key


SPOOL_AT_MOST = 1024 * MIB
"""The most the spool, and the handoff, take of the data volume by default."""


def default_spool_max_bytes(directory: Path) -> int:
    """A quarter of the free space where the spool files go, at most `SPOOL_AT_MOST`: spooled
    tarballs must never fill the data volume the memory of first-party names lives on."""
    for candidate in (directory, *directory.parents):
        try:
            stats = os.statvfs(candidate)
        except OSError:
            continue
        return min(SPOOL_AT_MOST, stats.f_bavail * stats.f_frsize // 4)
    return 0


def _handoff_max_bytes(read: _Reader, data_dir: Path) -> int:
    if read.raw("MIRRORGATE_HANDOFF_MAX_BYTES") is None:
        return default_spool_max_bytes(data_dir / "handoff")
    return read.integer("MIRRORGATE_HANDOFF_MAX_BYTES", 0, None, str(256 * MIB))


def _spool_max_bytes(read: _Reader, data_dir: Path) -> int:
    if read.raw("MIRRORGATE_SPOOL_MAX_BYTES") is None:
        return default_spool_max_bytes(data_dir / "spool")
    return read.integer("MIRRORGATE_SPOOL_MAX_BYTES", 0, None, str(256 * MIB))


def _writable(directory: Path) -> bool:
    """Whether files can be created in `directory`, or in the nearest existing directory above
    it (where it would be created): a read-only root filesystem, or a directory of another
    user's, says no. Nothing is written to find out."""
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


NOTIFY_SECRET_MIN = 32
WEBHOOK_TOKEN_PATH = 20
"""A webhook path this long is taken for a token (Slack's and Teams' are 60 characters and
more) and masked on its own too; a short one (`/mirrorgate`) would blank ordinary words."""


def _oidc(read: _Reader) -> OidcSettings:
    name = "MIRRORGATE_OIDC_AUDIENCE"
    audience = read.raw(name) or "mirrorgate"
    if len(audience) > 200 or any(c.isspace() or not c.isprintable() for c in audience):
        read.problem(name, "must be one word of at most 200 printable characters, the audience "
                     f"the CI jobs request their ID token for, e.g. {name}=mirrorgate")
        audience = "mirrorgate"
    return OidcSettings(audience, read.seconds("MIRRORGATE_OIDC_TIMEOUT", 0.1, "5"))


def _notify(read: _Reader) -> NotifySettings:
    name = "MIRRORGATE_NOTIFY_URL"
    value = read.raw(name)
    url: SecretUrl | None = None
    if value is not None:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            parts = urlsplit("")
        # the value is never echoed: a webhook URL is a credential
        if parts.scheme not in ("http", "https") or not parts.hostname:
            read.problem(name, "is not an http:// or https:// URL; set the webhook's URL, "
                         f"e.g. {name}=https://hooks.example.com/mirrorgate")
        elif parts.username or parts.password:
            read.problem(name, "credentials in the URL are refused; a webhook carries its "
                         "token in its path, and MIRRORGATE_NOTIFY_SECRET signs the body")
        else:
            url = SecretUrl(value)
    secret = _secret(read, "MIRRORGATE_NOTIFY_SECRET", "secret")
    if secret is not None and len(secret.reveal()) < NOTIFY_SECRET_MIN:
        read.problem("MIRRORGATE_NOTIFY_SECRET", f"the secret is {len(secret.reveal())} "
                     f"characters; use at least {NOTIFY_SECRET_MIN}, e.g. the output of "
                     "`openssl rand -base64 48`")
        secret = None
    if secret is not None and url is None and value is None:
        read.problem("MIRRORGATE_NOTIFY_SECRET", "is set without MIRRORGATE_NOTIFY_URL; set "
                     "the webhook to sign for, or drop the secret")
    return NotifySettings(url, secret)


def _names(read: _Reader, name: str) -> tuple[str, ...]:
    """A comma-separated list of client names, each once, in order."""
    return tuple(dict.fromkeys(
        part.strip() for part in (read.raw(name) or "").split(",") if part.strip()))


def _database_url(read: _Reader) -> PasswordUrl | None:
    found = _secret(read, "MIRRORGATE_DATABASE_URL", "database URL")
    if found is None:
        return None
    value = found.reveal()
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("postgres", "postgresql") or not parts.hostname:
        read.problem("MIRRORGATE_DATABASE_URL", "is not a PostgreSQL URL; set it like "
                     "MIRRORGATE_DATABASE_URL=postgresql://mirrorgate:PASSWORD@db:5432/mirrorgate "
                     "(the value is not shown: it may hold a password)")
        return None
    return PasswordUrl(value)


def _data_dir(read: _Reader) -> Path:
    explicit = read.raw("MIRRORGATE_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = read.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "mirrorgate"


def default_max_in_flight() -> int:
    """64 requests doing upstream work per core, at least 64: each is mostly waiting on a
    socket, so the bound is about memory and fairness, not CPU."""
    return max(64, 64 * (os.cpu_count() or 1))


def _max_in_flight(read: _Reader) -> int:
    if read.raw("MIRRORGATE_MAX_IN_FLIGHT") is None:
        return default_max_in_flight()
    return read.integer("MIRRORGATE_MAX_IN_FLIGHT", 1, 100_000, str(default_max_in_flight()))


def _malware_feed(read: _Reader) -> str | None:
    name = "MIRRORGATE_MALWARE_FEED"
    value = read.raw(name) or OSV_NPM_EXPORT
    if value.lower() == "off":
        return None
    if "://" in value:
        if not value.startswith("https://"):
            read.problem(name, "is a URL but not https; known malware is fetched over https "
                         f"only, e.g. {name}={OSV_NPM_EXPORT}, or off")
            return None
        return value
    path = Path(value).expanduser()
    if not path.exists():
        # a copy kept on disk (an air-gapped site) must be there at start: a typo would
        # otherwise leave the gate without known malware, saying so only in a log line
        read.problem(name, f"{path} does not exist; point it at a copy of the OSV npm export "
                     "(a zip, or a directory of its records), an https URL of one, or off")
        return None
    return str(path)


def load_settings(
    environ: Mapping[str, str] | None = None,
    npm_registry: Callable[[], str | None] = npm_configured_registry,
) -> Settings:
    """The settings the environment describes; raises ConfigError listing every problem."""
    read = _Reader(os.environ if environ is None else environ)
    queue = _queue(read)
    data_dir = _data_dir(read)

    # unset: the registry npm itself is configured with; no registry host name is written
    # into mirrorgate
    public = read.raw("MIRRORGATE_PUBLIC_UPSTREAM")
    if public is None:
        public = npm_registry()
        if public is None:
            read.problem("MIRRORGATE_PUBLIC_UPSTREAM", "is not set and npm's own registry "
                         "setting could not be read; set the public registry, e.g. "
                         "MIRRORGATE_PUBLIC_UPSTREAM=https://registry.example.com/")
    public = read.url("MIRRORGATE_PUBLIC_UPSTREAM", public, ("http", "https")) or ""

    private = read.url("MIRRORGATE_PRIVATE_UPSTREAM", read.raw("MIRRORGATE_PRIVATE_UPSTREAM"),
                       ("http", "https", "file"))
    private = private or f"file://{(data_dir / 'store').resolve()}"
    target = read.url("MIRRORGATE_MIRROR_TARGET", read.raw("MIRRORGATE_MIRROR_TARGET"),
                      ("http", "https", "file")) or private
    if public and private and public.rstrip("/") == private.rstrip("/"):
        read.problem("MIRRORGATE_PRIVATE_UPSTREAM", "is the same registry as the public "
                     "upstream; point it at the organisation's own registry")

    public_url = read.url("MIRRORGATE_PUBLIC_URL", read.raw("MIRRORGATE_PUBLIC_URL"),
                          ("http", "https"))
    rules = read.raw("MIRRORGATE_RULES_FILE")
    rules_file = Path(rules).expanduser() if rules else None
    if rules_file is not None and not rules_file.is_file():
        read.problem("MIRRORGATE_RULES_FILE", f"{rules_file} is not a readable file; point it at "
                     "a TOML rules file (docs/serving.md#admission-rules)")

    tokens = read.raw("MIRRORGATE_CLIENT_TOKENS_FILE")
    tokens_file = Path(tokens).expanduser() if tokens else None
    if tokens_file is not None and not tokens_file.is_file():
        read.problem("MIRRORGATE_CLIENT_TOKENS_FILE", f"{tokens_file} is not a readable file; "
                     "point it at the client tokens file (docs/serving.md#who-may-use-it)")

    settings = Settings(
        queue=queue,
        listen=read.address("MIRRORGATE_LISTEN"),
        worker_listen=read.address("MIRRORGATE_WORKER_LISTEN"),
        public_url=public_url,
        public_upstream=public,
        private_upstream=private,
        private_token=_token(read),
        proxy_token=_secret(read, "MIRRORGATE_PROXY_TOKEN", "token"),
        mirror_target=target,
        data_dir=data_dir,
        rules_file=rules_file,
        client_tokens_file=tokens_file,
        metrics_open=read.flag("MIRRORGATE_METRICS_OPEN"),
        trusted_proxies=read.networks("MIRRORGATE_TRUSTED_PROXIES"),
        cache_ttl=read.seconds("MIRRORGATE_CACHE_TTL", 0, "60"),
        cache_max_entries=read.integer("MIRRORGATE_CACHE_MAX_ENTRIES", 1, None, "5000"),
        cache_max_bytes=read.integer("MIRRORGATE_CACHE_MAX_BYTES", MIB, None, str(512 * MIB)),
        max_metadata_bytes=read.integer("MIRRORGATE_MAX_METADATA_BYTES", 1024, None,
                                        str(32 * MIB)),
        max_tarball_bytes=read.integer("MIRRORGATE_MAX_TARBALL_BYTES", 1024, None,
                                       str(256 * MIB)),
        max_publish_bytes=read.integer("MIRRORGATE_MAX_PUBLISH_BYTES", 1024, None,
                                       str(100 * MIB)),
        upstream_timeout=read.seconds("MIRRORGATE_UPSTREAM_TIMEOUT", 0.1, "30"),
        request_timeout=read.seconds("MIRRORGATE_REQUEST_TIMEOUT", 0.1, "60"),
        max_deliveries=read.integer("MIRRORGATE_MAX_DELIVERIES", 1, None, "5"),
        worker_concurrency=read.integer("MIRRORGATE_WORKER_CONCURRENCY", 1, 64, "1"),
        pool_fills=read.integer("MIRRORGATE_POOL_FILLS", 1, 4096, "32"),
        pool_tarballs=read.integer("MIRRORGATE_POOL_TARBALLS", 1, 4096, "64"),
        pool_worker=read.integer("MIRRORGATE_POOL_WORKER", 1, 4096, "8"),
        max_in_flight=_max_in_flight(read),
        head_timeout=read.seconds("MIRRORGATE_HEAD_TIMEOUT", 0.1, "10"),
        keepalive_timeout=read.seconds("MIRRORGATE_KEEPALIVE_TIMEOUT", 0.1, "75"),
        write_stall_timeout=read.seconds("MIRRORGATE_WRITE_STALL_TIMEOUT", 0.1, "30"),
        send_min_rate=read.integer("MIRRORGATE_SEND_MIN_RATE", 0, None, "500"),
        send_min_rate_grace=read.seconds("MIRRORGATE_SEND_MIN_RATE_GRACE", 0, "20"),
        spool_max_bytes=_spool_max_bytes(read, data_dir),
        handoff_max_bytes=_handoff_max_bytes(read, data_dir),
        release_previous_max_bytes=read.integer("MIRRORGATE_RELEASE_PREVIOUS_MAX_BYTES", 1024,
                                                None, str(64 * MIB)),
        release_timeout=read.seconds("MIRRORGATE_RELEASE_TIMEOUT", 0.1, "20"),
        heartbeat_stale_after=read.seconds("MIRRORGATE_HEARTBEAT_STALE_AFTER", 1, "120"),
        drain_timeout=read.seconds("MIRRORGATE_DRAIN_TIMEOUT", 0, "30"),
        log_level=read.choice("MIRRORGATE_LOG_LEVEL", ("info", "debug", "warning", "error")),
        log_format=read.choice("MIRRORGATE_LOG_FORMAT", ("auto", "json", "console")),
        event_loop=_event_loop(read),
        notify=_notify(read),
        oidc=_oidc(read),
        operator_contact=_contact(read),
        waiver_granters=_names(read, "MIRRORGATE_WAIVER_GRANTERS"),
        operators=_names(read, "MIRRORGATE_OPERATORS"),
        database_url=_database_url(read),
        pull_log_retention_days=read.integer("MIRRORGATE_PULL_LOG_RETENTION", 1, 3650, "90"),
        malware_feed=_malware_feed(read),
        pull_log_max_records=read.integer("MIRRORGATE_PULL_LOG_MAX_RECORDS", 1_000,
                                          1_000_000_000, "10000000"),
    )
    if settings.pool_worker < settings.worker_concurrency:
        read.problem("MIRRORGATE_POOL_WORKER", f"{settings.pool_worker} connections cannot "
                     f"serve MIRRORGATE_WORKER_CONCURRENCY={settings.worker_concurrency} jobs "
                     "at once; raise it to at least the concurrency, e.g. "
                     f"MIRRORGATE_POOL_WORKER={max(8, settings.worker_concurrency)}")
    if read.problems:
        raise ConfigError(read.problems)
    return settings
