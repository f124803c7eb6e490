"""The domain: digests parsed from npm's dist fields, artifacts that cannot lack a digest, and
the strict versioned codec."""

from __future__ import annotations

import dataclasses
import hashlib

import orjson
import pytest

from mirrorgate.integrity import (
    Digest,
    digests_from_dist,
    parse_integrity,
    parse_shasum,
    strongest,
)
from mirrorgate.mirror import (
    JobDecodeError,
    MirrorArtifact,
    decode_job,
    encode_job,
    traceparent_text,
)
from mirrorgate.moments import time_text
from tests.builders import make_artifact, make_job
from tests.sri import sri

DATA = b"some tarball bytes"
SHA512 = sri("sha512", DATA).removeprefix("sha512-")
SHA256 = sri("sha256", DATA).removeprefix("sha256-")
SHA1_HEX = hashlib.sha1(DATA).hexdigest()  # noqa: S324 - npm's shasum is sha1


def test_an_sri_string_yields_every_entry_and_ignores_options() -> None:
    got = parse_integrity(f"sha512-{SHA512}?foo=bar  sha256-{SHA256}")
    assert got == (Digest("sha512", SHA512), Digest("sha256", SHA256))


def test_unknown_algorithms_are_kept_but_never_chosen_for_verification() -> None:
    got = parse_integrity(f"md5-AAAA sha256-{SHA256}")
    assert Digest("md5", "AAAA") in got
    assert strongest(got) == Digest("sha256", SHA256)
    assert strongest((Digest("md5", "AAAA"),)) is None


def test_malformed_sri_entries_are_skipped() -> None:
    assert parse_integrity("sha512-!!!! nonsense sha512-") == ()


def test_a_hex_shasum_becomes_a_sha1_digest() -> None:
    digest = parse_shasum(SHA1_HEX)
    assert digest is not None
    assert digest.algorithm == "sha1"
    assert digest.raw() == bytes.fromhex(SHA1_HEX)
    assert parse_shasum("not-hex") is None


def test_dist_digests_are_the_integrity_entries_then_the_shasum() -> None:
    got = digests_from_dist({"integrity": f"sha512-{SHA512}", "shasum": SHA1_HEX})
    assert [d.algorithm for d in got] == ["sha512", "sha1"]
    assert digests_from_dist({}) == ()


def test_strongest_prefers_sha512_over_weaker_digests() -> None:
    sha1 = parse_shasum(SHA1_HEX)
    assert sha1 is not None
    chosen = strongest((sha1, Digest("sha256", SHA256), Digest("sha512", SHA512)))
    assert chosen == Digest("sha512", SHA512)


def test_an_artifact_without_a_digest_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="at least one digest"):
        MirrorArtifact("http://127.0.0.1:9/a.tgz", "a.tgz", 1, ())


def test_a_job_drops_the_readme_from_its_manifest() -> None:
    job = make_job(manifest={"name": "a", "version": "1.0.0", "readme": "# long"})
    assert "readme" not in job.manifest


def test_the_codec_round_trips_every_field() -> None:
    job = make_job("@acme/widget", "1.0.0", artifact=make_artifact(
        size=None, digests=(Digest("sha512", SHA512), Digest("sha1", "c2hhMQ=="))),
        published="2024-02-23T18:01:12.345Z")
    assert decode_job(encode_job(job)) == job
    assert decode_job(encode_job(job)).manifest == job.manifest
    assert decode_job(encode_job(job)).published == "2024-02-23T18:01:12.345Z"


def test_a_job_from_an_older_proxy_without_the_publish_time_still_decodes() -> None:
    job = decode_job(_body(published=KeyError))
    assert job.published is None
    assert job == make_job()


def test_the_serve_path_drops_a_public_time_it_cannot_vouch_for_not_the_job() -> None:
    assert time_text("2024-02-23T18:01:12.345Z") == "2024-02-23T18:01:12.345Z"
    assert time_text("yesterday") is None
    assert time_text(1708711272) is None


def test_a_publish_time_without_a_zone_is_kept_and_read_as_utc_like_every_other_time() -> None:
    # the age rule reads `time[version]` the same way (tests/rules/test_evaluate.py)
    assert time_text("2024-02-23T18:01:12") == "2024-02-23T18:01:12"
    assert decode_job(_body(published="2024-02-23T18:01:12")).published == "2024-02-23T18:01:12"


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_trace_context_travels_in_the_job_and_is_not_part_of_what_the_job_is() -> None:
    job = dataclasses.replace(make_job(), traceparent=TRACEPARENT)

    assert orjson.loads(encode_job(job))["traceparent"] == TRACEPARENT
    assert decode_job(encode_job(job)).traceparent == TRACEPARENT
    assert job == make_job()  # the same bytes to mirror, whatever trace asked for them


def test_a_job_without_a_trace_encodes_exactly_as_an_older_proxy_wrote_it() -> None:
    assert "traceparent" not in orjson.loads(encode_job(make_job()))
    assert decode_job(encode_job(make_job())).traceparent is None


@pytest.mark.parametrize("value", [
    "not a trace", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    TRACEPARENT.upper(), TRACEPARENT + "-extra", 7, None, ["x"], TRACEPARENT + "0" * 300,
])
def test_a_trace_context_that_cannot_be_read_starts_a_new_trace_and_never_retires_the_job(
    value: object,
) -> None:
    job = decode_job(_body(traceparent=value))

    assert job.traceparent is None
    assert job == make_job()


def test_a_later_trace_context_version_is_read_by_its_first_fields() -> None:
    later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert traceparent_text(later) == later


def _body(**changes: object) -> bytes:
    data = orjson.loads(encode_job(make_job()))
    for path, value in changes.items():
        where = data
        keys = path.split("__")
        for key in keys[:-1]:
            where = where[key]
        if value is KeyError:
            del where[keys[-1]]
        else:
            where[keys[-1]] = value
    return orjson.dumps(data)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (_body(v=KeyError), "missing field v"),
        (_body(v=2), "unknown codec version"),
        (_body(v=True), "unknown codec version"),
        (_body(name=KeyError), "missing field name"),
        (_body(version=3), "field version should be str"),
        (_body(manifest="x"), "field manifest should be dict"),
        (_body(artifact__digests=[]), "artifact.digests is empty"),
        (_body(artifact__digests=["nonsense"]), "not one SRI digest"),
        (_body(artifact__digests=[7]), "holds a int"),
        (_body(artifact__size=-1), "artifact.size"),
        (_body(artifact__size=KeyError), "missing field artifact.size"),
        (_body(artifact__tarball=None), "artifact.tarball should be str"),
        (_body(published=1708711272), "field published should be an ISO 8601 time"),
        (_body(published="last tuesday"), "field published should be an ISO 8601 time"),
    ],
)
def test_the_codec_refuses_anything_else_naming_the_problem(body: bytes, problem: str) -> None:
    with pytest.raises(JobDecodeError, match=problem):
        decode_job(body)
