"""The access decision on its own, with no HTTP server: a presented token's client or the
refusal, against a real tokens file and the loopback issuer.

The attacks: a guessed or rotated-out static token let in; an ID token let in by a proxy whose
tokens file trusts no issuer (or without its issuer's keys even being asked); a job's token
taking a line meant for another repository; a token "signed" with the issuer's public key as
an HMAC secret; an issuer line named like an operator making every job it admits one. Beside
each, the control: the real static token and the real job's ID token are let in, as the lines
they match say, and the operator's own token is the operator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirrorgate.access.decision import UNKNOWN_TOKEN, Access, Refusal
from mirrorgate.access.oidc import Verifier
from mirrorgate.access.operators import Operators
from mirrorgate.access.tokens import ClientTokens, new_token, token_line
from tests.access.issuer import AUDIENCE, LoopbackIssuer, forged_hs256


def tokens(tmp_path: Path, text: str) -> ClientTokens:
    path = tmp_path / "client-tokens"
    path.write_text(text, encoding="utf-8")
    return ClientTokens(path)


@pytest.fixture
def reader_token() -> str:
    return new_token()


@pytest.fixture
async def access(tmp_path: Path, issuer: LoopbackIssuer,
                 reader_token: str) -> AsyncIterator[Access]:
    """A static reader beside one issuer line for the payments repositories' main branch."""
    text = (f"{token_line('dashboard', reader_token)}\n"
            f"payments-ci {issuer.issuer} repository=acme/payments-* ref=refs/heads/main "
            "publish:@acme-payments/*\n")
    decided = Access(tokens(tmp_path, text), Verifier(audience=AUDIENCE, timeout=5))
    yield decided
    await decided.close()


async def test_the_static_token_is_its_client_and_a_guessed_one_is_refused_as_unknown(
    access: Access, reader_token: str, issuer: LoopbackIssuer,
) -> None:
    control = await access.client(reader_token)
    last = "a" if reader_token[-1] != "a" else "b"
    near_miss = await access.client(reader_token[:-1] + last)  # one character off

    assert not isinstance(control, Refusal)
    assert (control.name, control.identity) == ("dashboard", None)
    assert near_miss is UNKNOWN_TOKEN
    assert (near_miss.status, near_miss.counted) == (401, "bad_client_token")
    assert issuer.requests == []  # a static token never costs the issuer a fetch


async def test_the_job_s_id_token_signs_in_and_another_repository_s_is_refused_403(
    access: Access, issuer: LoopbackIssuer,
) -> None:
    control = await access.client(issuer.mint("acme/payments-api"))
    other = await access.client(issuer.mint("acme/web-app"))

    assert not isinstance(control, Refusal)
    assert control.name == "payments-ci"
    assert control.identity is not None
    assert control.identity.repository == "acme/payments-api"
    assert control.digest == b""  # an ID token's client has no static digest to match
    assert isinstance(other, Refusal)
    assert (other.status, other.reason, other.counted) == (
        403, "no issuer line applies", "oidc_no_issuer_line_applies")
    assert other.signed_in
    # the claims that decided travel with the refusal, for its log line; never the token
    assert other.identity is not None
    assert other.identity.repository == "acme/web-app"


async def test_a_token_signed_with_the_public_key_as_an_hmac_secret_is_refused(
    access: Access, issuer: LoopbackIssuer,
) -> None:
    forged = await access.client(forged_hs256(issuer.claims("acme/payments-api"), issuer.key))

    assert isinstance(forged, Refusal)
    assert (forged.status, forged.reason) == (401, "algorithm not allowed")


async def test_without_issuer_lines_an_id_token_is_an_unknown_token_and_no_issuer_is_asked(
    tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    reader = new_token()
    access = Access(tokens(tmp_path, token_line("dashboard", reader) + "\n"),
                    Verifier(audience=AUDIENCE, timeout=5))
    try:
        id_token = await access.client(issuer.mint("acme/payments-api"))
        control = await access.client(reader)
    finally:
        await access.close()

    assert id_token is UNKNOWN_TOKEN
    assert not isinstance(control, Refusal)
    assert control.name == "dashboard"
    assert issuer.requests == []  # neither discovery nor the key set was fetched



async def test_a_job_whose_issuer_line_bears_an_operator_s_name_is_no_operator(
    tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    operator = new_token()
    # a line's name is unique in the file, but MIRRORGATE_WAIVER_GRANTERS may name either kind
    text = f"{token_line('admin', operator)}\nops {issuer.issuer} repository=acme/*\n"
    access = Access(tokens(tmp_path, text), Verifier(audience=AUDIENCE, timeout=5))
    try:
        job = await access.client(issuer.mint("acme/anything"))
        control = await access.client(operator)
    finally:
        await access.close()
    operators = Operators.named(operators=(), granters=("ops", "admin"))

    assert not isinstance(job, Refusal)
    assert not isinstance(control, Refusal)
    assert (job.name, control.name) == ("ops", "admin")
    assert not operators.include(job)
    assert not operators.may_grant(job)
    assert operators.include(control)
    assert operators.may_grant(control)
    assert not Operators.named(("admin",), ()).may_grant(control)  # reads pulls, grants none
