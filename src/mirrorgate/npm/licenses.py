"""A package's declared license read as npm reads it, from a registry manifest or the
package.json inside its tarball: the text the license rule judges and the SBOM declares.

npm's own reading is `npm sbom`'s (lib/utils/sbom-cyclonedx.js and sbom-spdx.js, npm 11): a
`license` object's `type`, else a legacy `licenses` array's types joined with " OR ".
`UNLICENSED` and `SEE LICENSE IN <file>` are npm's words for no grant and a custom license
(@npmcli/package-json lib/license.js), which no SPDX expression says.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_LICENSE_CHARS", "declared_license", "license_file", "unlicensed"]

MAX_LICENSE_CHARS = 1000
"""A declaration longer than this is cut here (a manifest is the publisher's text): no SPDX
expression of real licenses comes near it, so a cut one is never read as valid."""
_SEE = re.compile(r"SEE LICEN[CS]E IN (.+)", re.DOTALL)


def _type_of(value: Any) -> Any:
    # `typeof l === 'object' ? l.type : l` (null is an object in JavaScript: its `.type`
    # throws there; here it is read as no type)
    if isinstance(value, Mapping):
        return value.get("type")
    return None if value is None else value


def _truthy(value: Any) -> bool:
    # JavaScript truthiness for a JSON value: "", 0, false and null are falsy; [] and {} not
    return value not in ("", 0, False, None)


def declared_license(manifest: Mapping[str, Any] | None) -> str | None:
    """The license `manifest` declares as npm reads it, or None when it declares none:

        let license = node.package?.license
        if (license) {
          if (typeof license === 'object') { license = license.type }
        } else if (Array.isArray(node.package?.licenses)) {
          license = node.package.licenses
            .map(l => (typeof l === 'object' ? l.type : l)).filter(Boolean).join(' OR ')
        }

    A value that is not text there (a number, an object without a `type`) declares nothing
    a license rule can read: None, as for a missing one."""
    if not isinstance(manifest, Mapping):
        return None
    license_ = manifest.get("license")
    if _truthy(license_):
        # an array is an object to `typeof` too: its `.type` is undefined, and the legacy
        # `licenses` are not read
        found = (license_.get("type") if isinstance(license_, Mapping)
                 else None if isinstance(license_, list) else license_)
    else:
        legacy = manifest.get("licenses")
        if not isinstance(legacy, list):
            return None
        types = [_type_of(item) for item in legacy]
        texts = [t if isinstance(t, str) else _js_text(t) for t in types if _truthy(t)]
        found = " OR ".join(text for text in texts if text is not None) if texts else None
    if not isinstance(found, str) or not found.strip():
        return None
    return sys.intern(found[:MAX_LICENSE_CHARS])  # one copy of "MIT" per process, not per version


def _js_text(value: Any) -> str | None:
    """What `Array.prototype.join` writes for a non-string type (a number, true): its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def unlicensed(text: str) -> bool:
    """npm's `UNLICENSED` (and its British spelling): the publisher grants no license."""
    return text in ("UNLICENSED", "UNLICENCED")


def license_file(text: str) -> str | None:
    """The file `SEE LICENSE IN <file>` points to, or None: npm's way to a custom license."""
    found = _SEE.fullmatch(text)
    return found.group(1).strip() if found is not None else None
