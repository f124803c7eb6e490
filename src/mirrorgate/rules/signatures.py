"""Registry signatures: `dist.signatures` checked against the public registry's signing keys.

A signature that does not verify means the metadata was changed after publication (tampered
integrity, a swapped tarball), whatever the tarball holds.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_public_key

from mirrorgate.moments import moment
from mirrorgate.rules.takeover import Finding

__all__ = ["REGISTRY_SIGNATURE", "KeySet", "RegistryKey", "SignatureRule", "check_signature",
           "parse_keys"]

REGISTRY_SIGNATURE = "registry-signature"
_MEMO_LIMIT = 200_000
_MAX_KEYS = 64
_MAX_SIGNATURES = 8


@dataclass(frozen=True)
class SignatureRule:
    """`[signatures]`: verify or not, and what a version without a signature (or a registry
    without keys) gets."""

    verify: bool = False
    missing: Literal["admit", "deny"] = "admit"


@dataclass(frozen=True, slots=True)
class RegistryKey:
    keyid: str
    key: ec.EllipticCurvePublicKey
    expires: datetime | None


@dataclass
class KeySet:
    """The registry's keys by keyid, with a memo of verified messages: a packument is re-gated
    every cache fill, and ECDSA verification (about 0.1 ms) of thousands of versions each time
    would cost more than the rest of the gate. A fresh key set starts a fresh memo."""

    keys: Mapping[str, RegistryKey]
    _memo: dict[tuple[str, str, str], bool] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def verifies(self, key: RegistryKey, message: str, signature: str) -> bool:
        memo_key = (key.keyid, message, signature)
        known = self._memo.get(memo_key)
        if known is not None:
            return known
        try:
            key.key.verify(base64.b64decode(signature, validate=True), message.encode(),
                           ec.ECDSA(hashes.SHA256()))
            good = True
        except (InvalidSignature, binascii.Error, ValueError):
            good = False
        with self._lock:  # large packuments are gated in a thread, beside the event loop
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[memo_key] = good
        return good


def parse_keys(document: Mapping[str, Any]) -> KeySet:
    """The keys of a `/-/npm/v1/keys` answer (`{"keys": [{keyid, keytype, scheme, key,
    expires}]}`, `key` base64 DER SubjectPublicKeyInfo). Keys of another type are skipped, as
    npm skips them; raises ValueError when nothing usable is there."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise ValueError("the keys document has no `keys` array")
    keys: dict[str, RegistryKey] = {}
    for entry in entries[:_MAX_KEYS]:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("keyid"), str):
            continue
        if entry.get("keytype") != "ecdsa-sha2-nistp256":
            continue
        try:
            loaded = load_der_public_key(base64.b64decode(str(entry.get("key")), validate=True))
        except (ValueError, binascii.Error, TypeError):
            continue
        if not isinstance(loaded, ec.EllipticCurvePublicKey) or loaded.curve.name != "secp256r1":
            continue
        expires = entry.get("expires")
        keys[entry["keyid"]] = RegistryKey(entry["keyid"], loaded,
                                           moment(expires) if expires is not None else None)
    if not keys:
        raise ValueError("the keys document lists no ECDSA P-256 key")
    return KeySet(keys)


def _missing(rule: SignatureRule, label: str, why: str) -> Finding | None:
    if rule.missing == "admit":
        return None
    return Finding(REGISTRY_SIGNATURE, f"{label} {why}, and signatures.missing is \"deny\"")


def check_signature(rule: SignatureRule, keys: KeySet | None, name: str, version: str,
                    manifest: Mapping[str, Any], published: object) -> Finding | None:
    """A denial when `dist.signatures` does not verify against `keys` (tampered metadata),
    or, under `missing = "deny"`, when there is no signature or no key to check it with.

    The npm registry signs `name@version:integrity` with ECDSA P-256 (SHA-256) at publish.
    The check mirrors `npm audit signatures`: every signature must name a listed key, the key
    must not have expired before the version was published, and the signature must verify."""
    if not rule.verify:
        return None
    label = f"{name}@{version}"
    dist = manifest.get("dist")
    signatures = dist.get("signatures") if isinstance(dist, Mapping) else None
    integrity = dist.get("integrity") if isinstance(dist, Mapping) else None
    if not isinstance(signatures, list) or not signatures:
        return _missing(rule, label, "carries no registry signature (dist.signatures)")
    if keys is None:
        return _missing(rule, label, "cannot be checked: the public registry's signing keys "
                        "are unavailable")
    tampered = f"{label}'s registry signature does not verify: its metadata was changed after " \
               "the registry signed it (tampered)"
    if not isinstance(integrity, str):
        return Finding(REGISTRY_SIGNATURE, f"{tampered}; it has signatures but no integrity")
    message = f"{name}@{version}:{integrity}"
    when = moment(published)
    for signature in signatures[:_MAX_SIGNATURES]:
        keyid = signature.get("keyid") if isinstance(signature, Mapping) else None
        sig = signature.get("sig") if isinstance(signature, Mapping) else None
        key = keys.keys.get(keyid) if isinstance(keyid, str) else None
        if key is None or not isinstance(sig, str):
            return Finding(REGISTRY_SIGNATURE, f"{tampered}; it is signed with a key the public "
                           "registry does not list")
        # npm's rule: a key is good for versions published before it expired; an unknown
        # publish time cannot be shown to be before it.
        if key.expires is not None and (when is None or when >= key.expires):
            return Finding(REGISTRY_SIGNATURE, f"{label} is signed with the registry key "
                           f"{key.keyid[:80]}, which expired at "
                           f"{key.expires:%Y-%m-%dT%H:%M:%SZ}, before the version's publish "
                           "time; the signature cannot be trusted")
        if not keys.verifies(key, message, sig):
            return Finding(REGISTRY_SIGNATURE, tampered)
    return None
