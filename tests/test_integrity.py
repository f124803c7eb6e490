"""Streaming verification: the strongest digest decides, sizes are bounded while bytes arrive."""

from __future__ import annotations

import base64
import hashlib
import random

import pytest

from mirrorgate.integrity import (
    Agreement,
    Digest,
    DigestMismatch,
    SizeMismatch,
    StreamVerifier,
    TooLarge,
    Unverifiable,
    agreement,
    digest_of,
    dist_digests,
    parse_shasum,
)

DATA = random.Random(3).randbytes(200_000)
OTHER = random.Random(4).randbytes(200_000)


def feed(verifier: StreamVerifier, data: bytes, step: int) -> None:
    for start in range(0, len(data), step):
        verifier.update(data[start:start + step])


def sha1_of(data: bytes) -> Digest:
    digest = parse_shasum(hashlib.sha1(data, usedforsecurity=False).hexdigest())
    assert digest is not None
    return digest


@pytest.mark.parametrize("step", [997, 4096, 65_536, 200_000])
def test_bytes_streamed_in_any_chunking_verify_like_the_whole(step: int) -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=len(DATA),
                              limit=1 << 20)
    feed(verifier, DATA, step)
    verified = verifier.finish()
    assert verified.digest == digest_of("sha512", DATA)
    assert verified.size == len(DATA)


def test_the_strongest_digest_is_the_one_checked() -> None:
    digests = (sha1_of(DATA), digest_of("sha256", DATA), digest_of("sha384", DATA),
               digest_of("sha512", DATA))
    verifier = StreamVerifier(digests, expected_size=None, limit=1 << 20)
    assert verifier.expected.algorithm == "sha512"


def test_a_matching_weaker_digest_never_rescues_a_failing_stronger_one() -> None:
    verifier = StreamVerifier((digest_of("sha512", OTHER), sha1_of(DATA)), expected_size=None,
                              limit=1 << 20)
    feed(verifier, DATA, 65_536)
    with pytest.raises(DigestMismatch) as raised:
        verifier.finish()
    assert raised.value.expected == digest_of("sha512", OTHER)
    assert raised.value.actual == digest_of("sha512", DATA)


def test_a_declared_content_length_above_the_cap_is_refused_before_reading() -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=None, limit=1000)
    with pytest.raises(TooLarge):
        verifier.declared_length(1001)
    assert verifier.size == 0


def test_a_stream_without_a_length_is_stopped_at_the_chunk_that_crosses_the_cap() -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=None, limit=10_000)
    verifier.declared_length(None)
    with pytest.raises(TooLarge) as raised:
        feed(verifier, DATA, 4096)
    assert raised.value.size == 12_288


def test_a_stream_running_past_the_declared_size_is_stopped_early() -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=5000, limit=1 << 20)
    with pytest.raises(SizeMismatch) as raised:
        feed(verifier, DATA, 4096)
    assert raised.value.complete is False
    assert verifier.size == 8192


def test_a_stream_shorter_than_the_declared_size_fails_at_the_end() -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=len(DATA) + 1,
                              limit=1 << 20)
    feed(verifier, DATA, 65_536)
    with pytest.raises(SizeMismatch) as raised:
        verifier.finish()
    assert (raised.value.expected, raised.value.actual) == (len(DATA) + 1, len(DATA))


def test_only_unknown_algorithms_cannot_be_verified() -> None:
    with pytest.raises(Unverifiable, match="md5"):
        StreamVerifier((Digest("md5", base64.b64encode(b"x" * 16).decode()),),
                       expected_size=None, limit=10)


def test_a_digest_spelled_without_padding_is_the_same_digest() -> None:
    padded = digest_of("sha256", DATA)
    verifier = StreamVerifier((Digest("sha256", padded.value),), expected_size=None,
                              limit=1 << 20)
    verifier.update(DATA)
    assert verifier.finish().digest == padded


def test_dist_digests_reuses_the_verified_sha512_and_adds_the_sha1_shasum() -> None:
    verifier = StreamVerifier((digest_of("sha512", DATA),), expected_size=None, limit=1 << 20)
    verifier.update(DATA)
    described = dist_digests(DATA, verifier.finish(), (digest_of("sha512", DATA),))
    assert described.integrity == digest_of("sha512", DATA).sri()
    assert described.shasum == hashlib.sha1(DATA, usedforsecurity=False).hexdigest()


def test_dist_digests_computes_sha512_when_a_weaker_digest_was_verified() -> None:
    verifier = StreamVerifier((sha1_of(DATA),), expected_size=None, limit=1 << 20)
    verifier.update(DATA)
    described = dist_digests(DATA, verifier.finish(), (sha1_of(DATA),))
    assert described.integrity == digest_of("sha512", DATA).sri()


def test_dist_digests_refuses_bytes_a_carried_sha1_contradicts() -> None:
    job = (digest_of("sha512", DATA), sha1_of(OTHER))
    verifier = StreamVerifier(job, expected_size=None, limit=1 << 20)
    verifier.update(DATA)
    with pytest.raises(DigestMismatch) as raised:
        dist_digests(DATA, verifier.finish(), job)
    assert raised.value.expected.algorithm == "sha1"


def test_a_stored_dist_agrees_only_on_the_jobs_strongest_algorithm() -> None:
    job = (digest_of("sha512", DATA), sha1_of(DATA))
    same = {"integrity": digest_of("sha512", DATA).sri(),
            "shasum": hashlib.sha1(DATA, usedforsecurity=False).hexdigest()}
    assert agreement(same, job)[0] is Agreement.SAME
    other = {"integrity": digest_of("sha512", OTHER).sri()}
    assert agreement(other, job) == (Agreement.DIFFERENT, digest_of("sha512", OTHER))
    weaker = {"shasum": hashlib.sha1(DATA, usedforsecurity=False).hexdigest()}
    assert agreement(weaker, job)[0] is Agreement.UNKNOWN
    assert agreement({}, job)[0] is Agreement.UNKNOWN
    assert agreement(None, job)[0] is Agreement.UNKNOWN


@pytest.mark.parametrize("value", ["", "=", "A", "AA", "A=", "AA==", "AAA=", "AAAA", "AA=A",
                                   "AA===", "AA==AA==", "-_-_", "AA AA", "AAAA\n", "é", "AA=\t"])
def test_a_digest_value_decodes_as_strict_base64_does(value: str) -> None:
    # the gate's own decoding of every digest, against the standard library's
    try:
        expected: bytes | None = base64.b64decode(value, validate=True)
    except ValueError:
        expected = None
    try:
        found: bytes | None = Digest("sha512", value).raw()
    except ValueError:
        found = None
    assert found == expected
