"""Signed jobs: an HMAC-SHA256 over the encoded job, carried on the line before it.

With `MIRRORGATE_JOB_KEY` set on the proxy and the worker, a network queue carries each job as
`mirrorgate-signed-v1 <base64 HMAC-SHA256 of the job bytes>\\n<the v1 job JSON, unchanged>`, so
a queue writer without the key cannot make the worker do anything, not even fetch.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from mirrorgate.config import Secret
from mirrorgate.mirror import JobDecodeError, MirrorJob, decode_job

__all__ = ["PREFIX", "JobCodec", "JobSignatureError", "payload"]

# ASCII, and a JSON text never starts with `m`: a reader tells signed from unsigned by the
# first bytes.
PREFIX = b"mirrorgate-signed-v1 "
_SIGNATURE_CHARS = 44
"""base64 of 32 bytes, padding included."""


class JobSignatureError(JobDecodeError):
    """A job the worker's keys do not vouch for; `reason` is `unsigned` or `bad-signature`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _mac(key: Secret, body: bytes) -> bytes:
    return hmac.new(key.reveal().encode("utf-8"), body, hashlib.sha256).digest()


def payload(body: bytes) -> bytes:
    """The job bytes of a body, signed or not (no check): for log lines about a refused send."""
    if body.startswith(PREFIX):
        return body.partition(b"\n")[2]
    return body


@dataclass(frozen=True)
class JobCodec:
    """How a network backend writes and reads job bodies: signed when `key` is set.

    Rotation: `previous` (MIRRORGATE_JOB_KEY_PREVIOUS) is accepted beside `key` while the jobs
    signed with it drain; `seal` always uses `key`. Keys are `config.Secret`s, registered with
    the log scrubber at start-up; no error, log line or metric here ever carries one."""

    key: Secret | None = None
    previous: Secret | None = None

    def seal(self, body: bytes) -> bytes:
        """`body` (the encoded job, as it will travel) with its signature line, if keyed.

        The signature covers the exact bytes that travel (after any escaping a backend applies),
        so nothing is canonicalised and the v1 codec reads what follows the line unchanged. The
        line costs 66 bytes of the 1 MiB budget (SQS; Pub/Sub allows 10 MB)."""
        if self.key is None:
            return body
        return PREFIX + base64.b64encode(_mac(self.key, body)) + b"\n" + body

    def open(self, body: bytes) -> MirrorJob:
        """The job a received body carries; raises JobSignatureError when this codec has a
        key and no key of it signed the body, JobDecodeError when it is not a job.

        Without a key a signed job is read unchecked, so the key is set on the proxy first,
        then on the worker; with one, an unsigned job or one no key verifies is refused."""
        if not body.startswith(PREFIX):
            if self.key is not None:
                raise JobSignatureError("unsigned", "the message carries no signature and "
                                        "MIRRORGATE_JOB_KEY is set: only signed jobs are read")
            return decode_job(body)
        line, newline, job = body.partition(b"\n")
        signature = line[len(PREFIX):]
        if not newline or len(signature) != _SIGNATURE_CHARS:
            raise JobSignatureError("bad-signature", "the signature line is malformed")
        if self.key is not None and not self._verifies(signature, job):
            raise JobSignatureError("bad-signature", "the signature does not verify with "
                                    "MIRRORGATE_JOB_KEY or MIRRORGATE_JOB_KEY_PREVIOUS")
        return decode_job(job)

    def _verifies(self, signature: bytes, job: bytes) -> bool:
        try:
            given = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            return False
        keys = [key for key in (self.key, self.previous) if key is not None]
        # constant-time, and every key is tried, so the time taken does not say which matched
        matches = [hmac.compare_digest(given, _mac(key, job)) for key in keys]
        return any(matches)
