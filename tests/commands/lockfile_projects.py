"""Lockfiles written by the real clients (npm, pnpm 8 and 10, yarn 1, yarn 4) for one small
tree, for the lockfile readers and `mirrorgate check` to read.

The tree is `standard_tree()` (one scoped package, real ranges between versions) plus what
lockfiles make awkward: two `npm:` aliases (one of them scoped), `resolve` (which yarn 4 locks
twice, once as a `patch:` of the npm version), a `file:` directory and a git
repository made on the spot and served over git's "dumb" HTTP from loopback (yarn 4 refuses
`git+file:` URLs). Each client resolves the tree against a fixture registry and writes its
lockfile; nothing here is hand-written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.package_managers import MODULES, PackageManager, Pnpm, client
from tests.servers.packages import FixturePackage, make_package, standard_tree
from tests.servers.processes import ServerUnavailableError
from tests.servers.threaded import ThreadedApp

__all__ = ["ALIASES", "LOCKFILES", "REGISTRY_VERSIONS", "GeneratedLockfile", "GitServer",
           "dependencies", "tree_packages", "write_lockfile"]

ALIASES = {"zed": ("zeta", "^1.0.0"), "beta-old": ("@fixture/beta", "2.0.0")}
"""alias -> (real name, range): `"zed": "npm:zeta@^1.0.0"` in package.json."""

REGISTRY_VERSIONS = {"alpha": "1.2.0", "@fixture/beta": "2.1.3", "gamma": "3.1.0",
                     "delta": "0.4.2", "epsilon": "1.2.0", "zeta": "1.0.1", "resolve": "1.22.8"}
"""What every client resolves from the registry (besides the aliases' `@fixture/beta@2.0.0`)."""


def tree_packages() -> list[FixturePackage]:
    """What the fixture registry serves for the project."""
    return [*standard_tree().packages, make_package("resolve", ["1.21.0", "1.22.8"])]


@dataclass(frozen=True)
class GeneratedLockfile:
    """A lockfile kind: which client writes it, with which extra install arguments."""

    client: str
    filename: str
    install_args: tuple[str, ...] = ()


LOCKFILES: dict[str, GeneratedLockfile] = {
    "npm-v1": GeneratedLockfile("npm", "package-lock.json", ("--lockfile-version=1",)),
    "npm-v2": GeneratedLockfile("npm", "package-lock.json", ("--lockfile-version=2",)),
    "npm-v3": GeneratedLockfile("npm", "package-lock.json", ("--lockfile-version=3",)),
    "pnpm-v6": GeneratedLockfile("pnpm8", "pnpm-lock.yaml"),
    "pnpm-v9": GeneratedLockfile("pnpm", "pnpm-lock.yaml"),
    "yarn-classic": GeneratedLockfile("yarn1", "yarn.lock"),
    "yarn-berry": GeneratedLockfile("yarn4", "yarn.lock"),
    "bun": GeneratedLockfile("bun", "bun.lock"),
}


class Pnpm8(Pnpm):
    """pnpm 8, the last to write lockfile v6 (`tests/clients` installs it as `pnpm8`)."""

    def command(self) -> list[str]:
        script = MODULES / "pnpm8" / "bin" / "pnpm.cjs"
        if not script.is_file():
            raise ServerUnavailableError(f"{script} is missing; run ./scripts/test")
        node = shutil.which("node")
        if node is None:
            raise ServerUnavailableError("node is not on PATH; install Node.js 20+")
        return [node, str(script)]


def _git(repo: Path, *args: str) -> None:
    if shutil.which("git") is None:
        raise ServerUnavailableError("git is not on PATH; the git dependency needs it")
    subprocess.run(["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.com",
                    "-c", "init.defaultBranch=main", *args], cwd=repo, check=True,
                   capture_output=True, timeout=60)


def _local_package(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps(
        {"name": name, "version": "0.1.0", "main": "index.js", "license": "MIT"}) + "\n",
        encoding="utf-8")
    (folder / "index.js").write_text("module.exports = 1;\n", encoding="utf-8")


class GitServer(ThreadedApp):
    """`git-thing.git`, a one-commit bare repository, over git's dumb HTTP protocol (static
    files after `git update-server-info`), on loopback."""

    def __init__(self, root: Path) -> None:
        self.root = root
        work = root / "work"
        _local_package(work, "git-thing")
        _git(work, "init", "-q")
        _git(work, "add", ".")
        _git(work, "commit", "-q", "-m", "git-thing 0.1.0")
        _git(root, "clone", "-q", "--bare", str(work), str(root / "served" / "git-thing.git"))
        _git(root / "served" / "git-thing.git", "update-server-info")
        super().__init__(self._app, name="git-server")

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_static("/", self.root / "served")
        return app

    @property
    def repository(self) -> str:
        return f"git+{self.url}git-thing.git"


def dependencies(project: Path, git: GitServer) -> dict[str, str]:
    """The project's dependencies, making the `file:` folder in `project`."""
    _local_package(project / "local-thing", "local-thing")
    deps = {"alpha": "^1.0.0", "@fixture/beta": "~2.1.0", "resolve": "^1.21.0",
            "local-thing": "file:./local-thing", "git-thing": git.repository}
    deps.update({alias: f"npm:{name}@{spec}" for alias, (name, spec) in ALIASES.items()})
    return deps


def write_lockfile(kind: str, workdir: Path, registry: FixtureRegistry,
                   git: GitServer) -> Path:
    """Have the client for `kind` (a `LOCKFILES` key) install the tree from `registry` (and
    `git`) in a project under `workdir` and return the lockfile it wrote."""
    spec = LOCKFILES[kind]
    manager: PackageManager = (Pnpm8(workdir) if spec.client == "pnpm8"
                               else client(spec.client, workdir))
    manager.configure(registry.url)
    if spec.client == "yarn4":
        # yarn 4.18 clones only from repositories the project approves
        with (manager.project / ".yarnrc.yml").open("a", encoding="utf-8") as rc:
            rc.write(f'approvedGitRepositories:\n  - "{git.url}**"\n')
    manager.write_project(dependencies(manager.project, git))
    done = manager.run(*("install", *spec.install_args, *manager.isolation()), timeout=240)
    lockfile = manager.project / spec.filename
    if done.returncode != 0 or not lockfile.is_file() or lockfile.stat().st_size == 0:
        raise AssertionError(f"{spec.client} install failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
    return lockfile
