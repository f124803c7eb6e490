"""Shared set-up for the commands' tests: settings as the environment gives them, the standard
tree on the fixture public registry, and versions mirrored the way prewarm mirrors them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from mirrorgate.commands.parts import open_command_queue, open_parts
from mirrorgate.commands.prewarm import Result, follow_worker, merge, plan
from mirrorgate.config import Settings, load_settings
from mirrorgate.process import CommandMirroring
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import FixtureTree, standard_tree
from tests.servers.processes import OFFLINE, mirrorgate_argv


def settings_for(public: FixtureRegistry, data: Path, **env: str) -> Settings:
    base = load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": public.url,
                          "MIRRORGATE_DATA_DIR": str(data), **OFFLINE, **env},
                         npm_registry=lambda: None)
    return dataclasses.replace(base, upstream_timeout=5.0)


def published_tree(public: FixtureRegistry) -> FixtureTree:
    tree = standard_tree()
    for package in tree.packages:
        public.add(package)
    return tree


def by_label(results: list[Result]) -> dict[str, Result]:
    return {result.label: result for result in results}


async def prewarm_with_the_worker(settings: Settings,
                                  locked: list[tuple[str, str]]) -> list[Result]:
    async with open_parts(settings, mirroring=CommandMirroring) as parts, \
            open_command_queue(settings) as queue:
        planned = await plan(locked, source=parts.source, queue=queue)
        followed = await follow_worker(planned.jobs, queue, parts.mirroring(), within=30)
    return merge(planned, followed)




@dataclasses.dataclass(frozen=True)
class CommandRun:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        document: dict[str, Any] = orjson.loads(self.stdout)
        return document

    def statuses(self) -> dict[str, str]:
        """package@version -> status, from the `--json` document."""
        return {f"{r['package']}@{r['version']}": r["status"] for r in self.json()["results"]}


def run_command(args: list[str], env: Mapping[str, str], workdir: Path,
                timeout: float = 180.0) -> CommandRun:
    """The real `mirrorgate` command, once, with only `env` (plus a home and a data directory
    of its own unless given): what an operator or a CI step runs."""
    home = workdir / "command-home"
    home.mkdir(parents=True, exist_ok=True)
    full = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LANG": "C.UTF-8",
            "MIRRORGATE_LOG_FORMAT": "json", "MIRRORGATE_DATA_DIR": str(workdir / "data"),
            **OFFLINE, **env}
    if "PYTHONPATH" in os.environ:
        full["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run([*mirrorgate_argv(), *args], env=full, capture_output=True,
                          text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                          cwd=workdir)
    return CommandRun(done.returncode, done.stdout, done.stderr)


def locked_by_npm(npm: NpmClient, public: FixtureRegistry, tree: FixtureTree) -> Path:
    """The project's package-lock.json, written by the real npm installing from `public`."""
    npm.write_project(tree.dependencies)
    done = npm.install(registry=public.url)
    assert done.returncode == 0, done.stderr
    return npm.project / "package-lock.json"
