"""Signed jobs: the HMAC line before the v1 job, the keys a worker accepts, and their settings.

The attack each case stops: a producer with send rights on the queue but without the key
(unsigned, signed with its own key, a tampered body under a real signature, a malformed line).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mirrorgate.config import ConfigError, Secret, load_settings
from mirrorgate.integrity import parse_integrity
from mirrorgate.jobsign import PREFIX, JobCodec, JobSignatureError, payload
from mirrorgate.mirror import MirrorArtifact, MirrorJob, decode_job, encode_job

KEY = Secret("current-" + "x" * 40)
OLD = Secret("previous-" + "y" * 40)
OTHER = Secret("attacker-" + "z" * 40)
JOB = MirrorJob("left-pad", "1.3.0", MirrorArtifact(
    "http://public.invalid/left-pad/-/left-pad-1.3.0.tgz", "left-pad-1.3.0.tgz", 10,
    parse_integrity("sha512-" + "A" * 86 + "==")), {"name": "left-pad", "version": "1.3.0"})
BODY = encode_job(JOB)


def refusal(codec: JobCodec, body: bytes) -> str:
    with pytest.raises(JobSignatureError) as raised:
        codec.open(body)
    return raised.value.reason


def test_a_signed_job_reads_back_as_the_same_job_and_the_v1_body_travels_unchanged() -> None:
    sealed = JobCodec(KEY).seal(BODY)

    assert sealed.startswith(PREFIX)
    assert sealed.endswith(b"\n" + BODY)
    assert len(sealed) - len(BODY) == 66  # the whole cost against a 1 MiB message
    assert JobCodec(KEY).open(sealed) == JOB
    assert payload(sealed) == BODY


def test_a_worker_with_a_key_refuses_an_unsigned_job() -> None:
    assert refusal(JobCodec(KEY), BODY) == "unsigned"


def test_a_job_signed_with_another_key_is_refused() -> None:
    assert refusal(JobCodec(KEY, OLD), JobCodec(OTHER).seal(BODY)) == "bad-signature"


def test_a_changed_body_under_a_real_signature_is_refused() -> None:
    sealed = JobCodec(KEY).seal(BODY)
    changed = sealed.replace(b"left-pad-1.3.0.tgz", b"evil-pad-1.3.0.tgz")

    assert refusal(JobCodec(KEY), changed) == "bad-signature"


def test_the_signature_covers_the_trace_context_a_job_carries() -> None:
    traced = encode_job(dataclasses.replace(
        JOB, traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
    sealed = JobCodec(KEY).seal(traced)
    rewritten = sealed.replace(b"00f067aa0ba902b7", b"1111111111111111")

    assert JobCodec(KEY).open(sealed).traceparent is not None
    assert refusal(JobCodec(KEY), rewritten) == "bad-signature"


@pytest.mark.parametrize("line", [
    PREFIX + b"not base64 at all!!!!!!!!!!!!!!!!!!!!!!!!!!\n",
    PREFIX + b"short\n",
    PREFIX + b"A" * 43 + b"=",  # a signature and no line break before the job
])
def test_a_malformed_signature_line_is_refused(line: bytes) -> None:
    assert refusal(JobCodec(KEY), line + BODY) == "bad-signature"


def test_during_a_rotation_the_previous_key_is_accepted_beside_the_current() -> None:
    rotating = JobCodec(KEY, OLD)

    assert rotating.open(JobCodec(OLD).seal(BODY)) == JOB
    assert rotating.open(JobCodec(KEY).seal(BODY)) == JOB


def test_without_a_key_jobs_are_read_signed_or_not() -> None:
    assert JobCodec().seal(BODY) == BODY
    assert JobCodec().open(BODY) == JOB
    assert JobCodec().open(JobCodec(OTHER).seal(BODY)) == JOB
    assert decode_job(BODY) == JOB


def settings(**variables: str) -> dict[str, str]:
    return {"MIRRORGATE_PUBLIC_UPSTREAM": "http://public.invalid/", **variables}


def test_the_keys_are_read_from_the_environment_or_a_file_and_never_shown(
        tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY.reveal() + "\n", encoding="utf-8")

    loaded = load_settings(settings(MIRRORGATE_JOB_KEY_FILE=str(key_file),
                                    MIRRORGATE_JOB_KEY_PREVIOUS=OLD.reveal()),
                           npm_registry=lambda: None)

    assert loaded.queue.job_key == KEY
    assert loaded.queue.job_key_previous == OLD
    shown = str(loaded.summary()) + repr(loaded)
    assert KEY.reveal() not in shown
    assert OLD.reveal() not in shown
    assert loaded.summary()["queue.job_key"] == "**redacted**"


@pytest.mark.parametrize(("variables", "problem"), [
    ({"MIRRORGATE_JOB_KEY": "too-short"}, "MIRRORGATE_JOB_KEY: the key is 9 characters; use at "
                                          "least 32"),
    ({"MIRRORGATE_JOB_KEY_PREVIOUS": OLD.reveal()}, "MIRRORGATE_JOB_KEY_PREVIOUS: is set "
                                                     "without MIRRORGATE_JOB_KEY"),
    ({"MIRRORGATE_JOB_KEY": KEY.reveal(), "MIRRORGATE_JOB_KEY_FILE": "/x"},
     "set either MIRRORGATE_JOB_KEY or MIRRORGATE_JOB_KEY_FILE, not both"),
    ({"MIRRORGATE_JOB_KEY": "has a space " + "x" * 40}, "whitespace or control characters"),
])
def test_a_key_that_cannot_be_honoured_is_refused_at_start_up_without_echoing_it(
        variables: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(settings(**variables), npm_registry=lambda: None)

    assert problem in str(raised.value)
    for value in variables.values():
        if len(value) > 8:
            assert value not in str(raised.value)
