"""The Dockerfile read as instructions, and the checks on it that hadolint cannot make.

No Docker engine runs where these tests run, so the image is never built here. What can be
checked without one is checked: hadolint's rules (run by `hadolint_findings`, strict: every
severity counts and inline ignore pragmas are disabled), and mirrorgate's own promises about
the image (`image_problems`): exact base tags that satisfy `requires-python`, a build stage and
a final stage, the wheel installed with the sqs, pubsub, otel and postgres extras, a numeric
non-root user, `mirrorgate` as the entrypoint and a default command the real parser accepts, and a
.dockerignore allow-list that keeps every file the Dockerfile copies.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from mirrorgate.__main__ import _parser

__all__ = [
    "Instruction",
    "dockerignore_problems",
    "hadolint_findings",
    "image_problems",
    "instructions",
]

EXACT_BASE = re.compile(r"^python:(?P<version>\d+\.\d+\.\d+)-slim-[a-z]+(@sha256:[0-9a-f]{64})?$")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str
    stage: int  # 0 before the first FROM, then 1, 2...


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: comments dropped, continuation lines joined."""
    found: list[Instruction] = []
    stage = 0
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if not whole:
            continue
        keyword, _, value = whole.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        found.append(Instruction(keyword, value.strip(), stage))
    return found


def _exec_form(value: str) -> list[str] | None:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
        return parsed
    return None


def _base_images(found: list[Instruction]) -> list[str]:
    args = {}
    for instruction in found:
        if instruction.keyword == "ARG" and instruction.stage == 0 and "=" in instruction.value:
            name, _, default = instruction.value.partition("=")
            args[name] = default
    images = []
    for instruction in found:
        if instruction.keyword == "FROM":
            image = instruction.value.split()[0]
            for name, default in args.items():
                image = image.replace("${" + name + "}", default).replace("$" + name, default)
            images.append(image)
    return images


def image_problems(text: str, requires_python: str) -> list[str]:
    found = instructions(text)
    problems = []
    images = _base_images(found)
    if len(images) < 2:
        problems.append("the image is not multi-stage: build the wheel in one stage and ship "
                        "only the venv in the last")
    for image in dict.fromkeys(images):
        match = EXACT_BASE.match(image)
        if match is None:
            problems.append(f"FROM {image}: not an exact slim Python tag such as "
                            "python:3.11.14-slim-bookworm")
        elif match.group("version") not in SpecifierSet(requires_python):
            problems.append(f"FROM {image}: Python {match.group('version')} does not satisfy "
                            f"pyproject's requires-python {requires_python}")
    last = max((i.stage for i in found), default=0)
    final = [i for i in found if i.stage == last]
    if not any(i.keyword == "RUN" and "[sqs,pubsub,otel,postgres]" in i.value for i in found):
        problems.append("no RUN installs mirrorgate with its sqs, pubsub, otel and postgres "
                        "extras")
    for instruction in final:
        if instruction.keyword in ("COPY", "ADD") and "--from=" not in instruction.value:
            problems.append(f"{instruction.keyword} {instruction.value}: the final stage takes "
                            "files from the build context; copy only the built venv")
    users = [i.value for i in final if i.keyword == "USER"]
    uid = users[-1].partition(":")[0] if users else "root"
    if not uid.isdigit() or int(uid) == 0:
        problems.append(f"the final stage runs as user {uid!r}; use a numeric non-root UID so "
                        "Kubernetes' runAsNonRoot can verify it")
    entrypoints = [_exec_form(i.value) for i in final if i.keyword == "ENTRYPOINT"]
    if not entrypoints or entrypoints[-1] != ["mirrorgate"]:
        problems.append('the entrypoint is not ["mirrorgate"] (exec form), which the '
                        "manifests' args rely on")
    commands = [_exec_form(i.value) for i in final if i.keyword == "CMD"]
    if commands and commands[-1] is not None:
        problems.extend(_command_problems(commands[-1]))
    elif commands:
        problems.append("CMD is not in exec form")
    return problems


def _command_problems(args: list[str]) -> list[str]:
    try:
        _parser().parse_args(args)
    except SystemExit:
        return [f"CMD {args!r} is not a command `mirrorgate --help` knows"]
    return []


def dockerignore_problems(dockerfile: str, dockerignore: str) -> list[str]:
    """Every COPY from the build context names a path the allow-list lets through.

    Handles the allow-list form the repository's .dockerignore uses: `*` then `!path` lines.
    """
    patterns = [line.strip() for line in dockerignore.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    if "*" not in patterns:
        return [".dockerignore does not start from `*` (an allow-list); the venv, "
                "node_modules and .git would enter the build context"]
    allowed = {p[1:].strip("/") for p in patterns if p.startswith("!")}
    problems = []
    for instruction in instructions(dockerfile):
        if instruction.keyword != "COPY" or "--from=" in instruction.value:
            continue
        *sources, _destination = shlex.split(instruction.value)
        for source in sources:
            if source.strip("/").split("/")[0] not in allowed:
                problems.append(f"COPY {source}: .dockerignore keeps it out of the build "
                                "context")
    return problems


def hadolint_findings(hadolint: Path, dockerfile: Path, scratch: Path) -> list[dict[str, Any]]:
    """hadolint's findings on `dockerfile`, every severity, inline ignores disabled.

    An empty configuration file is passed so no personal or repository hadolint config can
    relax the rules.
    """
    config = scratch / "hadolint.yaml"
    config.write_text("failure-threshold: style\n", encoding="utf-8")
    done = subprocess.run(
        [str(hadolint), "--config", str(config), "--disable-ignore-pragma", "--no-color",
         "--format", "json", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True, text=True, timeout=60, check=False, cwd=scratch,
    )
    findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    if done.returncode != 0 and not findings:
        raise RuntimeError(f"hadolint failed without findings: {done.stderr.strip()}")
    return findings
