"""An issuer's key set as the verifier keeps it: fetched once for many tokens, refreshed on an
unknown `kid` at a bounded rate, and dropped after its lifetime, against the loopback issuer
with the clock injected.

The attacks: a flood of tokens naming made-up `kid`s turning mirrorgate into an amplifier
against the issuer (or a queue behind one slow fetch), and a key the issuer withdrew going on
verifying because it was once cached.
"""

from __future__ import annotations

import asyncio
import warnings

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from mirrorgate.access.claims import ClaimMapping
from mirrorgate.access.oidc import KEYS_TTL, REFRESH_FLOOR, SignInRefused, Verifier
from mirrorgate.access.tokens import parse_tokens_file
from tests.access.issuer import AUDIENCE, LoopbackIssuer, SigningKey
from tests.clock import ManualClock

JWKS = "/.well-known/jwks"


def lines(issuer: LoopbackIssuer) -> tuple[ClaimMapping, ...]:
    return parse_tokens_file(f"ci {issuer.issuer} repository=acme/*\n", "tokens").mappings


async def refusal(verifier: Verifier, token: str,
                  mappings: tuple[ClaimMapping, ...]) -> SignInRefused:
    with pytest.raises(SignInRefused) as refused:
        await verifier.sign_in(token, mappings)
    return refused.value


async def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_refresh_floor(
    issuer: LoopbackIssuer,
) -> None:
    clock = ManualClock()
    verifier = Verifier(audience=AUDIENCE, timeout=5, clock=clock)
    mappings = lines(issuer)
    try:
        signed_in = await asyncio.gather(*(verifier.sign_in(issuer.mint("acme/api"), mappings)
                                           for _ in range(20)))
        made_up = [issuer.mint("acme/api", kid=f"made-up-{n}") for n in range(50)]
        floods = await asyncio.gather(*(refusal(verifier, token, mappings)
                                        for token in made_up))
        fetched_at_once = issuer.requests.count(JWKS)
        clock.advance(REFRESH_FLOOR + 1)
        later = await asyncio.gather(*(refusal(verifier, token, mappings)
                                       for token in made_up))
    finally:
        await verifier.close()

    assert {client.name for client in signed_in} == {"ci"}
    assert {refused.reason for refused in floods + later} == {"unknown key"}
    assert fetched_at_once == 1  # twenty sign-ins shared the first fetch; the flood none
    assert issuer.requests.count(JWKS) == 2  # fifty more, past the floor: one refresh


async def test_a_key_set_past_its_lifetime_is_fetched_again_and_a_withdrawn_key_stops(
    issuer: LoopbackIssuer,
) -> None:
    clock = ManualClock()
    verifier = Verifier(audience=AUDIENCE, timeout=5, clock=clock)
    mappings = lines(issuer)
    old_key = issuer.key
    try:
        assert (await verifier.sign_in(issuer.mint("acme/api"), mappings)).name == "ci"
        issuer.rotate()
        clock.advance(KEYS_TTL + 1)
        stale = await refusal(verifier, issuer.mint("acme/api", key=old_key), mappings)
    finally:
        await verifier.close()

    assert stale.reason == "unknown key"
    assert issuer.requests.count(JWKS) == 2


async def test_requests_waiting_on_a_hung_issuer_share_one_bounded_fetch(
    issuer: LoopbackIssuer,
) -> None:
    issuer.stall = True
    verifier = Verifier(audience=AUDIENCE, timeout=0.5)
    mappings = lines(issuer)
    try:
        waited = await asyncio.wait_for(asyncio.gather(
            *(refusal(verifier, issuer.mint("acme/api"), mappings) for _ in range(10))),
            timeout=3)
        at_once = await asyncio.wait_for(
            refusal(verifier, issuer.mint("acme/api"), mappings), timeout=0.2)
    finally:
        issuer.stall = False
        await verifier.close()

    assert {(r.status, r.reason) for r in [*waited, at_once]} == {
        (503, "issuer keys unavailable")}
    assert issuer.requests == ["/.well-known/openid-configuration"]


async def test_a_token_signed_with_a_short_rsa_key_the_issuer_published_is_refused(
    issuer: LoopbackIssuer,
) -> None:
    issuer.keys = [SigningKey("short", rsa.generate_private_key(public_exponent=65537,
                                                                key_size=1024))]  # noqa: S505 - the weak key is the attack
    with warnings.catch_warnings():  # PyJWT warns when it signs with it: the point here
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
        token = issuer.mint("acme/api")
    verifier = Verifier(audience=AUDIENCE, timeout=5)
    try:
        refused = await refusal(verifier, token, lines(issuer))
    finally:
        await verifier.close()

    assert (refused.status, refused.reason) == (401, "weak key")


async def test_two_issuers_at_once_and_a_hung_one_does_not_hold_up_the_other(
    issuer: LoopbackIssuer,
) -> None:
    with LoopbackIssuer() as gitlab:
        mappings = parse_tokens_file(
            f"github-ci {issuer.issuer} repository=acme/*\n"
            f"gitlab-ci {gitlab.issuer} project_path=acme/**\n", "tokens").mappings
        clock = ManualClock()
        verifier = Verifier(audience=AUDIENCE, timeout=2, clock=clock)
        try:
            github_job = await verifier.sign_in(issuer.mint("acme/api"), mappings)
            gitlab_token = gitlab.mint("acme/x", project_path="acme/platform/deployer")
            issuer.stall = True
            clock.advance(REFRESH_FLOOR + 1)  # the unknown `kid` below is fetched for
            hung = asyncio.ensure_future(verifier.sign_in(
                issuer.mint("acme/api", kid="rotated-meanwhile"), mappings))
            gitlab_job = await asyncio.wait_for(verifier.sign_in(gitlab_token, mappings),
                                                timeout=1)
            still_waiting = not hung.done()
            with pytest.raises(SignInRefused):
                await hung
        finally:
            issuer.stall = False
            await verifier.close()

    assert github_job.name == "github-ci"
    assert github_job.identity is not None
    assert github_job.identity.describe() == "acme/api, branch main"
    assert gitlab_job.name == "gitlab-ci"
    assert still_waiting
