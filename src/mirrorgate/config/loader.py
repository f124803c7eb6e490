"""`load_settings`: the environment into one validated `Settings`, or every problem at once.

The readers here are each one variable's rules beyond its type (a URL's scheme, a key's
length, what two variables must agree on); `Reader` does the typed reads. Called once at
start-up by `__main__`; a `ConfigError` lists each problem as a sentence a person can act on.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from mirrorgate.config.parts import PROVIDERS, NotifySettings, OidcSettings, QueueSettings
from mirrorgate.config.reader import Reader
from mirrorgate.config.secrets import PasswordUrl, Secret, SecretUrl
from mirrorgate.config.settings import Settings
from mirrorgate.config.variables import MIB, OSV_NPM_EXPORT, SQS_URL_HINT
from mirrorgate.errors import MirrorgateError


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


def _event_loop(read: Reader) -> str:
    choice = read.choice("MIRRORGATE_EVENT_LOOP", ("auto", "uvloop", "asyncio"))
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        read.problem("MIRRORGATE_EVENT_LOOP", "uvloop is not installed; install it (pip "
                     "install uvloop) or set MIRRORGATE_EVENT_LOOP=auto")
    return choice


def _contact(read: Reader) -> str | None:
    text = read.raw("MIRRORGATE_OPERATOR_CONTACT")
    # it goes into the 403 status line pnpm and yarn 4 print, and a terminal: one printable line
    if text is not None and (len(text) > 120 or any(not " " <= c <= "~" for c in text)):
        read.problem("MIRRORGATE_OPERATOR_CONTACT", "must be one line of at most 120 printable "
                     "ASCII characters, e.g. MIRRORGATE_OPERATOR_CONTACT=#npm-gate on chat")
        return None
    return text


def _queue(read: Reader) -> QueueSettings:
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


def _token(read: Reader) -> Secret | None:
    return read.secret("MIRRORGATE_PRIVATE_TOKEN", "token")


JOB_KEY_MIN = 32


def _job_key(read: Reader, name: str) -> Secret | None:
    key = read.secret(name, "key")
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


def _handoff_max_bytes(read: Reader, data_dir: Path) -> int:
    if read.raw("MIRRORGATE_HANDOFF_MAX_BYTES") is None:
        return default_spool_max_bytes(data_dir / "handoff")
    return read.integer("MIRRORGATE_HANDOFF_MAX_BYTES", 0, None, str(256 * MIB))


def _spool_max_bytes(read: Reader, data_dir: Path) -> int:
    if read.raw("MIRRORGATE_SPOOL_MAX_BYTES") is None:
        return default_spool_max_bytes(data_dir / "spool")
    return read.integer("MIRRORGATE_SPOOL_MAX_BYTES", 0, None, str(256 * MIB))


NOTIFY_SECRET_MIN = 32


def _oidc(read: Reader) -> OidcSettings:
    name = "MIRRORGATE_OIDC_AUDIENCE"
    audience = read.raw(name) or "mirrorgate"
    if len(audience) > 200 or any(c.isspace() or not c.isprintable() for c in audience):
        read.problem(name, "must be one word of at most 200 printable characters, the audience "
                     f"the CI jobs request their ID token for, e.g. {name}=mirrorgate")
        audience = "mirrorgate"
    return OidcSettings(audience, read.seconds("MIRRORGATE_OIDC_TIMEOUT", 0.1, "5"))


def _notify(read: Reader) -> NotifySettings:
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
    secret = read.secret("MIRRORGATE_NOTIFY_SECRET", "secret")
    if secret is not None and len(secret.reveal()) < NOTIFY_SECRET_MIN:
        read.problem("MIRRORGATE_NOTIFY_SECRET", f"the secret is {len(secret.reveal())} "
                     f"characters; use at least {NOTIFY_SECRET_MIN}, e.g. the output of "
                     "`openssl rand -base64 48`")
        secret = None
    if secret is not None and url is None and value is None:
        read.problem("MIRRORGATE_NOTIFY_SECRET", "is set without MIRRORGATE_NOTIFY_URL; set "
                     "the webhook to sign for, or drop the secret")
    return NotifySettings(url, secret)


def _names(read: Reader, name: str) -> tuple[str, ...]:
    """A comma-separated list of client names, each once, in order."""
    return tuple(dict.fromkeys(
        part.strip() for part in (read.raw(name) or "").split(",") if part.strip()))


def _database_url(read: Reader) -> PasswordUrl | None:
    found = read.secret("MIRRORGATE_DATABASE_URL", "database URL")
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


def _data_dir(read: Reader) -> Path:
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


def _max_in_flight(read: Reader) -> int:
    if read.raw("MIRRORGATE_MAX_IN_FLIGHT") is None:
        return default_max_in_flight()
    return read.integer("MIRRORGATE_MAX_IN_FLIGHT", 1, 100_000, str(default_max_in_flight()))


def _malware_feed(read: Reader) -> str | None:
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
    read = Reader(os.environ if environ is None else environ)
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
        proxy_token=read.secret("MIRRORGATE_PROXY_TOKEN", "token"),
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
