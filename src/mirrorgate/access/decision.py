"""The access decision: the client a presented token names, or the refusal saying why not.

A token is a static client's (the tokens file, matched in constant time) or a CI's ID token
one of the file's issuer lines lets in (`oidc`). Nothing here knows HTTP: `serve.access`
reads the Authorization header, applies the decision and renders its refusal.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from mirrorgate.access.claims import Identity
from mirrorgate.access.oidc import SignInRefused, Verifier, looks_like_jwt
from mirrorgate.access.tokens import Client, ClientTokens

__all__ = ["NO_TOKEN", "Access", "Refusal", "presented_token"]

_MAX_HEADER = 4096


def presented_token(header: str | None) -> str | None:
    """The token in an Authorization header, else None: `Bearer` (npm's `_authToken`) or the
    password of `Basic` (npm's `_auth`, any user name)."""
    if not header or len(header) > _MAX_HEADER:
        return None
    scheme, _, value = header.strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        return value or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _user, colon, password = decoded.partition(":")
        return password if colon and password else None
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request not let in: its status, a stable `reason` for logs, the sentence the client
    prints, the `mirrorgate_refusals` label it is counted under, and, for an ID token, the
    claims that decided (never the token) with `signed_in` set."""

    status: int
    reason: str
    message: str
    counted: str
    identity: Identity | None = None
    signed_in: bool = False

    @classmethod
    def of_sign_in(cls, refused: SignInRefused) -> Refusal:
        return cls(refused.status, refused.reason, refused.message,
                   "oidc_" + refused.reason.replace(" ", "_"), refused.identity, signed_in=True)


NO_TOKEN = Refusal(401, "no token", "mirrorgate needs a client token: set _authToken for this "
                   "registry in .npmrc (ask the operator for a token)", "no_client_token")
UNKNOWN_TOKEN = Refusal(401, "unknown token", "mirrorgate does not know this client token: it "
                        "may have been rotated; ask the operator for a current one",
                        "bad_client_token")


class Access:
    """Who may use the proxy: the tokens file in force and the verifier of its issuer lines'
    ID tokens (closed with `close`)."""

    def __init__(self, tokens: ClientTokens, verifier: Verifier) -> None:
        self.tokens = tokens
        self.verifier = verifier

    async def client(self, token: str) -> Client | Refusal:
        """The client `token` names: a static client's token, else an ID token an issuer line
        lets in; the refusal otherwise."""
        found = self.tokens.match(token)
        if found is not None:
            return found
        if self.tokens.mappings and looks_like_jwt(token):
            try:
                return await self.verifier.sign_in(token, self.tokens.mappings)
            except SignInRefused as refused:
                return Refusal.of_sign_in(refused)
        return UNKNOWN_TOKEN

    async def close(self) -> None:
        await self.verifier.close()
