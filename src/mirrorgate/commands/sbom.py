"""`mirrorgate sbom`: what a client, a CI job or anyone in a time window was served, as a
CycloneDX 1.6 bill of materials (`commands.cyclonedx`) or an SPDX 2.3 one (`commands.spdx`),
from the pull log in the state store (docs/licenses.md#mirrorgate-sbom).

Exit 0 with the document, 1 when no served pull matched (the document is still written: an
empty build is more often a wrong filter than an empty one), 2 on a question that cannot be
asked (no filter, a bad time, no store).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from mirrorgate.commands.cyclonedx import components, cyclonedx
from mirrorgate.commands.exposure import QuestionError, open_pull_log, parse_since
from mirrorgate.commands.spdx import spdx
from mirrorgate.config import StoreSettings
from mirrorgate.store import StoreUnavailableError

__all__ = ["FORMATS", "Selection", "run_sbom", "select"]

FORMATS = ("cyclonedx", "spdx")

LIMIT = 1_000_000
"""Pulls read for one document: the retention bounds the log, this bounds a mistake."""


@dataclass(frozen=True)
class Selection:
    """Whose pulls: the tokens file's client name, a CI job's repository, ref and workflow
    (as its ID token carried them), a time window (`since` included, `until` not)."""

    client: str | None = None
    repository: str | None = None
    ref: str | None = None
    workflow: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def identity(self) -> dict[str, str]:
        pairs = (("client_name", self.client), ("repository", self.repository),
                 ("ref", self.ref), ("workflow", self.workflow))
        return {column: value for column, value in pairs if value is not None}

    def build(self) -> dict[str, str | None]:
        """The build the document is of, for its metadata."""
        name = self.repository or self.client
        return {"name": name, "client": self.client, "ci:repository": self.repository,
                "ci:ref": self.ref, "ci:workflow": self.workflow,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}


def select(*, client: str | None, repository: str | None, branch: str | None,
           ref: str | None, workflow: str | None, since: str | None,
           until: str | None) -> Selection:
    """The selection the command line asks for; raises QuestionError."""
    if branch is not None and ref is not None:
        raise QuestionError("give --branch or --ref, not both (--branch main is "
                            "--ref refs/heads/main)")
    if branch is not None:
        ref = f"refs/heads/{branch}"
    selection = Selection(client, repository, ref, workflow,
                          parse_since(since) if since is not None else None,
                          parse_since(until, "--until") if until is not None else None)
    if not selection.identity() and selection.since is None:
        raise QuestionError("say whose build: --client NAME, --repository OWNER/REPO (with "
                            "--branch, --workflow), or a time window (--since TIME)")
    if selection.since and selection.until and selection.until <= selection.since:
        raise QuestionError("--until must be after --since")
    return selection


async def document(settings: StoreSettings, selection: Selection, now: datetime,
                   form: str = "cyclonedx") -> tuple[dict[str, object], int]:
    store = await open_pull_log(settings)
    try:
        pulls = await store.pulls(since=selection.since, until=selection.until,
                                  identity=selection.identity(), limit=LIMIT)
    except StoreUnavailableError as error:
        raise QuestionError(f"the state store cannot be read: {error}") from None
    finally:
        await store.close()
    found = components(pulls)
    written = (spdx if form == "spdx" else cyclonedx)(found, selection.build(), now=now)
    return written, len(found)


def run_sbom(settings: StoreSettings, selection: Selection, *, output: Path | None,
             form: str = "cyclonedx") -> int:
    try:
        bom, count = asyncio.run(document(settings, selection, datetime.now(UTC), form))
    except QuestionError as error:
        print(f"mirrorgate sbom: {error}", file=sys.stderr)
        return 2
    text = orjson.dumps(bom, option=orjson.OPT_INDENT_2) + b"\n"
    if output is None:
        sys.stdout.buffer.write(text)
        sys.stdout.flush()
    else:
        try:
            output.write_bytes(text)
        except OSError as error:
            print(f"mirrorgate sbom: cannot write {output}: {error.strerror or error}",
                  file=sys.stderr)
            return 2
    if count == 0:
        print("mirrorgate sbom: no served pull matched; check the client, repository, branch "
              "and window against `mirrorgate exposure --since TIME`", file=sys.stderr)
        return 1
    return 0
