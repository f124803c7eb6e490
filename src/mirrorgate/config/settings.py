"""The whole `Settings` the loader builds, and the slices it is cut into.

One frozen object holds every variable's value (check-config summarises it, the log scrubber
takes its secrets); the properties at its end cut it into the parts' slices (`parts`), which
is all a module below the composition root receives.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import urlsplit

from mirrorgate.config.parts import (
    GateSettings,
    IdentitySettings,
    LogSettings,
    Network,
    NotifySettings,
    OidcSettings,
    QueueSettings,
    ServeSettings,
    StoreSettings,
    UpstreamSettings,
    ViaProxySettings,
    WorkerSettings,
)
from mirrorgate.config.secrets import PasswordUrl, Secret, SecretUrl


class _Part(Protocol):
    """Any dataclass (what `dataclasses.fields` takes): the slices of `parts`."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


P = TypeVar("P", bound=_Part)

WEBHOOK_TOKEN_PATH = 20
"""A webhook path this long is taken for a token (Slack's and Teams' are 60 characters and
more) and masked on its own too; a short one (`/mirrorgate`) would blank ordinary words."""


def _writable(directory: Path) -> bool:
    """Whether files can be created in `directory`, or in the nearest existing directory above
    it (where it would be created): a read-only root filesystem, or a directory of another
    user's, says no. Nothing is written to find out."""
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


@dataclass(frozen=True)
class Settings:
    """Every variable's value as `load_settings` read it; the properties at the end cut it
    into the slices the parts receive."""

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
    # both frozen (`parts`), so one shared default instance is safe
    notify: NotifySettings = NotifySettings()  # noqa: RUF009
    oidc: OidcSettings = OidcSettings()  # noqa: RUF009
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

    # --- the slices (`parts`), cut at the composition root -----------------------------

    def _cut(self, part: type[P], **given: object) -> P:
        """The slice `part`: each of its fields is the same-named value here (a slice names
        its fields as `Settings` does, so none is renamed on the way), unless `given`."""
        return part(**{item.name: given[item.name] if item.name in given
                       else getattr(self, item.name) for item in fields(part)})

    @property
    def store(self) -> StoreSettings:
        return self._cut(StoreSettings)

    @property
    def upstreams(self) -> UpstreamSettings:
        return self._cut(UpstreamSettings)

    @property
    def gate(self) -> GateSettings:
        return self._cut(GateSettings)

    @property
    def identity(self) -> IdentitySettings:
        return self._cut(IdentitySettings)

    @property
    def serve(self) -> ServeSettings:
        return self._cut(ServeSettings, secrets=self.secrets())

    @property
    def worker(self) -> WorkerSettings:
        return self._cut(WorkerSettings)

    @property
    def via_proxy(self) -> ViaProxySettings:
        return self._cut(ViaProxySettings)

    @property
    def logs(self) -> LogSettings:
        return self._cut(LogSettings, secrets=self.secrets())
