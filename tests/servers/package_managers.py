"""The package managers people use (npm, pnpm, yarn 1, yarn 4, bun), each driven as a test
drives npm: its own project, config, cache, HOME and XDG directories, nothing shared.

pnpm, yarn 1, yarn 4 and bun are installed by `scripts/test` from `tests/clients/package.json`
(pinned, with its lock file); npm comes with Node. Decisions:

- The registry and token reach a client only through the project file docs/serving.md shows
  (`tests.servers.client_config`); everything else that isolates a run (cache, store, global
  folders) is a command-line flag or an environment variable, so the snippet stays what a
  person would write.
- The environment is rebuilt from PATH alone plus the client's own isolation variables: no
  `npm_config_*`, `YARN_*`, `BUN_*`, proxy or `CI` variable leaks in (`CI` switches pnpm and
  yarn 4 to frozen lockfiles, which a cold install must not get).
- Scripts never run (each client's `--ignore-scripts` or `enableScripts: false`), and failed
  fetches are not retried, so a refusal is reported at once.
- A run returns the `CompletedProcess` and never raises on a non-zero exit: tests assert on
  failures (a denied version) as much as on successes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from tests.servers.client_config import CLIENT_CONFIGS, TOKEN_VARIABLE, render
from tests.servers.npm import npm_executable
from tests.servers.processes import ServerUnavailableError

__all__ = ["CLIENTS", "CLIENTS_DIR", "PackageManager", "client"]

CLIENTS_DIR = Path(__file__).resolve().parents[1] / "clients"
MODULES = CLIENTS_DIR / "node_modules"
TOKEN = "mirrorgate-client-token"  # noqa: S105 - a fixed test value, not a secret
"""The token the clients' config reads from NPM_TOKEN; the client matrix runs mirrorgate with
client tokens on, so a client that did not send it would get 401."""


class PackageManager:
    """One client for one test directory: `configure(registry)`, `write_project(deps)`, then
    `install()`, `install_frozen()`; `installed(names)` reads what landed."""

    name: ClassVar[str]
    lockfile: ClassVar[str]
    frozen: ClassVar[tuple[str, ...]]

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.project = workdir / "project"
        self.cache = workdir / "cache"
        self.home = workdir / "home"
        for directory in (self.project, self.cache, self.home):
            directory.mkdir(parents=True, exist_ok=True)

    # -- what each client says differently --------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def isolation(self) -> list[str]:
        """Flags added to every install: cache location, no scripts, no retries."""
        return []

    def isolation_env(self) -> dict[str, str]:
        return {}

    # -- shared -----------------------------------------------------------------------------

    def configure(self, registry: str) -> None:
        """Write the client's config files (project and home) pointing at `registry`."""
        for file in CLIENT_CONFIGS[self.name]:
            folder = self.project if file.place == "project" else self.home
            (folder / file.filename).write_text(render(file, registry), encoding="utf-8")

    def write_project(self, dependencies: Mapping[str, str]) -> None:
        manifest = {"name": f"{self.name}-app", "version": "1.0.0", "private": True,
                    "dependencies": dict(dependencies)}
        (self.project / "package.json").write_text(json.dumps(manifest, indent=2) + "\n",
                                                   encoding="utf-8")

    def environment(self) -> dict[str, str]:
        xdg = self.home / "xdg"
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.home),
               "LANG": "C.UTF-8", "NO_COLOR": "1", "FORCE_COLOR": "0",
               "NO_UPDATE_NOTIFIER": "1", TOKEN_VARIABLE: TOKEN,
               "XDG_CONFIG_HOME": str(xdg / "config"), "XDG_CACHE_HOME": str(xdg / "cache"),
               "XDG_DATA_HOME": str(xdg / "data"), "XDG_STATE_HOME": str(xdg / "state")}
        env.update(self.isolation_env())
        return env

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """`<client> <args>` in the project directory, stdout and stderr as text."""
        return subprocess.run([*self.command(), *args], cwd=self.project,
                              env=self.environment(), capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)

    def install(self, *specs: str) -> subprocess.CompletedProcess[str]:
        """A plain install (resolving, writing the lockfile); with specs, `add` them."""
        verb = self.add_verb() if specs else "install"
        return self.run(verb, *specs, *self.isolation())

    def add_verb(self) -> str:
        return "add"

    def install_frozen(self) -> subprocess.CompletedProcess[str]:
        """Install exactly what the lockfile says, failing if it would change."""
        return self.run(*self.frozen, *self.isolation())

    def forget(self, *, lockfile: bool) -> None:
        """A cold start for the next install: empty cache, no node_modules, and no lockfile
        when `lockfile` is true."""
        shutil.rmtree(self.cache, ignore_errors=True)
        self.cache.mkdir(parents=True)
        for leftover in ("node_modules", ".yarn", ".pnp.cjs", ".pnp.loader.mjs"):
            path = self.project / leftover
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        if lockfile:
            (self.project / self.lockfile).unlink(missing_ok=True)

    def lockfile_text(self) -> str:
        return (self.project / self.lockfile).read_text(encoding="utf-8")

    def installed(self, names: Iterable[str]) -> dict[str, str]:
        """name -> version of each of `names` as the project resolves it (direct
        dependencies: pnpm links only those at the top)."""
        found: dict[str, str] = {}
        for name in names:
            manifest = self.project / "node_modules" / name / "package.json"
            if manifest.is_file():
                found[name] = json.loads(manifest.read_text(encoding="utf-8"))["version"]
        return found


def _node_script(path: Path) -> list[str]:
    if not path.is_file():
        raise ServerUnavailableError(f"{path} is missing; run ./scripts/test, which installs "
                                     "the clients from tests/clients/package.json")
    node = shutil.which("node")
    if node is None:
        raise ServerUnavailableError("node is not on PATH; install Node.js 20+")
    return [node, str(path)]


class Npm(PackageManager):
    name = "npm"
    lockfile = "package-lock.json"
    frozen = ("ci",)

    def command(self) -> list[str]:
        npm = npm_executable()
        if npm is None:
            raise ServerUnavailableError("npm is not on PATH; install Node.js 20+ with npm")
        return [npm]

    def add_verb(self) -> str:
        return "install"

    def isolation(self) -> list[str]:
        # The machine's global npmrc may omit `resolved` from lockfiles; these files do not.
        userconfig = self.home / "npmrc"
        userconfig.write_text("omit-lockfile-registry-resolved=false\n", encoding="utf-8")
        return [f"--userconfig={userconfig}", f"--globalconfig={self.home / 'global-npmrc'}",
                f"--cache={self.cache}", "--fetch-retries=0", "--no-audit", "--no-fund",
                "--ignore-scripts", "--loglevel=warn"]


class Pnpm(PackageManager):
    name = "pnpm"
    lockfile = "pnpm-lock.yaml"
    frozen = ("install", "--frozen-lockfile")

    def command(self) -> list[str]:
        return _node_script(MODULES / "pnpm" / "bin" / "pnpm.cjs")

    def isolation(self) -> list[str]:
        return [f"--store-dir={self.cache / 'store'}", f"--config.cache-dir={self.cache / 'meta'}",
                "--config.fetch-retries=0", "--reporter=append-only", "--ignore-scripts"]


class Yarn1(PackageManager):
    name = "yarn1"
    lockfile = "yarn.lock"
    frozen = ("install", "--frozen-lockfile")

    def command(self) -> list[str]:
        return _node_script(MODULES / "yarn" / "bin" / "yarn.js")

    def isolation(self) -> list[str]:
        return [f"--cache-folder={self.cache}", f"--global-folder={self.home / 'global'}",
                "--non-interactive", "--no-progress", "--ignore-scripts",
                "--network-timeout=30000"]


class Yarn4(PackageManager):
    """yarn berry with its defaults: Plug'n'Play and the one-day age gate
    (`npmMinimalAgeGate`), so fixture versions must be published more than a day ago."""

    name = "yarn4"
    lockfile = "yarn.lock"
    frozen = ("install", "--immutable")

    def command(self) -> list[str]:
        return _node_script(MODULES / "@yarnpkg" / "cli-dist" / "bin" / "yarn.js")

    def write_project(self, dependencies: Mapping[str, str]) -> None:
        super().write_project(dependencies)
        # an empty yarn.lock marks the project root, so yarn looks no further up
        (self.project / "yarn.lock").touch()

    def forget(self, *, lockfile: bool) -> None:
        super().forget(lockfile=lockfile)
        (self.project / "yarn.lock").touch()

    def isolation_env(self) -> dict[str, str]:
        return {"YARN_ENABLE_GLOBAL_CACHE": "false", "YARN_CACHE_FOLDER": str(self.cache),
                "YARN_GLOBAL_FOLDER": str(self.home / "yarn-global"),
                "YARN_ENABLE_IMMUTABLE_INSTALLS": "false", "YARN_ENABLE_SCRIPTS": "false",
                "YARN_ENABLE_TELEMETRY": "0", "YARN_ENABLE_PROGRESS_BARS": "false",
                "YARN_HTTP_RETRY": "0", "YARN_IGNORE_PATH": "1",
                # the global mirror would keep tarballs across "cold" installs
                "YARN_ENABLE_MIRROR": "false"}

    def installed(self, names: Iterable[str]) -> dict[str, str]:
        # Plug'n'Play: no node_modules; ask yarn's own runtime what `require` resolves
        wanted = list(names)
        script = ("const out = {}; for (const n of " + json.dumps(wanted) + ") { try { "
                  "out[n] = require(n + '/package.json').version } catch {} } "
                  "console.log(JSON.stringify(out))")
        done = self.run("node", "-e", script)
        if done.returncode != 0:
            return {}
        found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
        return found


class Bun(PackageManager):
    name = "bun"
    lockfile = "bun.lock"
    frozen = ("install", "--frozen-lockfile")

    def command(self) -> list[str]:
        binary = MODULES / "bun" / "bin" / "bun.exe"
        if not binary.is_file():
            raise ServerUnavailableError(f"{binary} is missing; run ./scripts/test")
        return [str(binary)]

    def isolation(self) -> list[str]:
        return [f"--cache-dir={self.cache}", "--no-progress", "--ignore-scripts",
                "--no-summary"]

    def isolation_env(self) -> dict[str, str]:
        return {"BUN_INSTALL_CACHE_DIR": str(self.cache), "BUN_INSTALL": str(self.home / "bun"),
                "DO_NOT_TRACK": "1"}


CLIENTS: dict[str, type[PackageManager]] = {
    client_type.name: client_type for client_type in (Npm, Pnpm, Yarn1, Yarn4, Bun)}


def client(name: str, workdir: Path) -> PackageManager:
    """The driver for `name` (one of `CLIENTS`), rooted at `workdir`."""
    return CLIENTS[name](workdir)
