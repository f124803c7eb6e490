"""What runs at install: npm's three lifecycle keys, and which of them a manifest declares.

The install-scripts rule, the abbreviated packument's `hasInstallScript` and the tarball scan
(`tarscripts`) all ask this, so they agree on what "runs code at install" means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["INSTALL_SCRIPT_KEYS", "install_commands", "install_scripts"]

INSTALL_SCRIPT_KEYS: tuple[str, ...] = ("preinstall", "install", "postinstall")


def install_scripts(manifest: Mapping[str, Any]) -> list[str]:
    """The install scripts `manifest` declares, in npm's order (an empty string runs nothing)."""
    scripts = manifest.get("scripts")
    if not isinstance(scripts, Mapping):
        return []
    return [key for key in INSTALL_SCRIPT_KEYS if scripts.get(key) not in (None, "")]


def install_commands(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The install hooks `manifest` declares, each with its command whole."""
    scripts = manifest.get("scripts")
    if not isinstance(scripts, Mapping):
        return {}
    return {key: scripts[key] for key in INSTALL_SCRIPT_KEYS
            if isinstance(scripts.get(key), str) and scripts[key]}
