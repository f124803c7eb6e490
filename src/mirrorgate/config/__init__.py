"""Environment variables into one frozen `Settings`, validated once at start-up, then sliced.

`variables` is the one table of variables (`--help`, `check-config` and docs/configuration.md
are generated from it); `loader` reads it into `settings.Settings`; `parts` holds the slice
each part of mirrorgate receives instead of the whole. Callers import from here.
"""

from __future__ import annotations

from mirrorgate.config.loader import ConfigError, load_settings, npm_configured_registry
from mirrorgate.config.parts import (
    PROVIDERS,
    CacheSettings,
    GateSettings,
    IdentitySettings,
    LogSettings,
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
from mirrorgate.config.settings import Settings
from mirrorgate.config.variables import (
    COMMANDS,
    OSV_NPM_EXPORT,
    PROXY,
    SQS_URL_HINT,
    VARIABLES,
    WORKER,
    Var,
    unknown_variables,
)

__all__ = [
    "COMMANDS",
    "OSV_NPM_EXPORT",
    "PROVIDERS",
    "PROXY",
    "SQS_URL_HINT",
    "VARIABLES",
    "WORKER",
    "CacheSettings",
    "ConfigError",
    "GateSettings",
    "IdentitySettings",
    "LogSettings",
    "NotifySettings",
    "OidcSettings",
    "PasswordUrl",
    "QueueSettings",
    "Secret",
    "SecretUrl",
    "ServeSettings",
    "Settings",
    "StoreSettings",
    "UpstreamSettings",
    "Var",
    "ViaProxySettings",
    "WorkerSettings",
    "load_settings",
    "npm_configured_registry",
    "unknown_variables",
]
