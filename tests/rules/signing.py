"""A registry signing key for the tests: an ECDSA P-256 pair, its `/-/npm/v1/keys` entry, and
`dist.signatures` made the way the npm registry makes them (over `name@version:integrity`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import FixtureVersion, fresh_version, make_version

KEYS = "/-/npm/v1/keys"


@dataclass
class SigningKey:
    keyid: str = "SHA256:mirrorgate-test-key"
    expires: str | None = None
    private: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))

    def entry(self) -> dict[str, Any]:
        der = self.private.public_key().public_bytes(Encoding.DER,
                                                     PublicFormat.SubjectPublicKeyInfo)
        return {"expires": self.expires, "keyid": self.keyid, "keytype": "ecdsa-sha2-nistp256",
                "scheme": "ecdsa-sha2-nistp256", "key": base64.b64encode(der).decode()}

    def sign(self, name: str, version: str, integrity: str) -> list[dict[str, str]]:
        message = f"{name}@{version}:{integrity}".encode()
        signature = self.private.sign(message, ec.ECDSA(hashes.SHA256()))
        return [{"keyid": self.keyid, "sig": base64.b64encode(signature).decode()}]


def keys_document(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.entry() for key in keys]}


def verify_served(document: dict[str, Any], name: str, version: str,
                  integrity: str, signatures: list[dict[str, str]]) -> bool:
    """What npm's check does with a served version: find each signature's key in the keys
    document and verify ECDSA/SHA-256 over `name@version:integrity`. Independent of
    mirrorgate's own verifier, so a test using it cannot pass by sharing a bug."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    by_id = {entry["keyid"]: entry for entry in document["keys"]}
    for signature in signatures:
        entry = by_id.get(signature["keyid"])
        if entry is None:
            return False
        key = load_der_public_key(base64.b64decode(entry["key"]))
        assert isinstance(key, ec.EllipticCurvePublicKey)
        try:
            key.verify(base64.b64decode(signature["sig"]),
                       f"{name}@{version}:{integrity}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
    return bool(signatures)


def serve_keys(registry: FixtureRegistry, *keys: SigningKey) -> None:
    registry.fault(KEYS, Fault(status=200, body=orjson.dumps(keys_document(*keys)),
                               headers={"Content-Type": "application/json"}), exact=True)


def signed(key: SigningKey, name: str, version: str, **fields: Any) -> FixtureVersion:
    """A version whose `dist.signatures` is the registry's signature over its integrity."""
    integrity = make_version(name, version, **fields).integrity
    return make_version(name, version, dist={"signatures": key.sign(name, version, integrity)},
                        **fields)


def takeover(name: str, quarantined: str, *, age: timedelta) -> list[FixtureVersion]:
    """Three versions published from CI with provenance by `ci-bot`, then one by `mallory`
    from a laptop, `age` ago."""
    attested = {"attestations": {"url": "http://127.0.0.1:9/-/npm/v1/attestations/x",
                                 "provenance": {"predicateType":
                                                "https://slsa.dev/provenance/v1"}}}
    history = [make_version(name, f"1.0.{n}", dist=attested,
                            _npmUser={"name": "ci-bot", "email": "ci@example.com"})
               for n in range(3)]
    return [*history, fresh_version(name, quarantined, age=age,
                                    _npmUser={"name": "mallory", "email": "m@example.com"})]

