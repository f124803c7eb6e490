"""The real npm client, isolated per test: its own config files, cache, HOME and project.

Whatever the machine's `~/.npmrc`, global npmrc or `npm_config_*` variables say, a test's npm
reads only what is written here. Decisions:

- Every run passes `--userconfig`, `--globalconfig`, `--cache` and `--registry` explicitly and
  runs with HOME pointed into the test's directory, with `npm_config_*` and proxy variables
  removed from its environment. The user npmrc sets `omit-lockfile-registry-resolved=false`
  (this machine's own sets `true`), so lockfiles carry `resolved` URLs as they do elsewhere.
- `--fetch-retries=0` (a failure is reported at once instead of after minutes of retries)
  unless a test asks for retries (`fetch_retries=N`, with a back-off of 0.3 to 2 s instead of
  npm's 10 to 60 s), `--no-audit --no-fund`, and `--ignore-scripts` unless a test asks for
  scripts.
- `npm ci` gets `--replace-registry-host=always`, so a lockfile written against one registry
  installs from the one the test names.
- A run returns the `CompletedProcess` (stdout and stderr as text) and never raises on a
  non-zero exit unless `check=True`: tests assert on npm's failures too (E403, EINTEGRITY).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["NpmClient", "npm_executable"]


def npm_executable() -> str | None:
    return shutil.which("npm")


class NpmClient:
    """npm for one test, rooted at `workdir` (which holds the project, cache, HOME and config).

    Set `registry` once (`npm_client.registry = proxy.registry_url`) or pass it per run.
    """

    def __init__(self, workdir: Path, registry: str | None = None) -> None:
        self.workdir = workdir
        self.project = workdir / "project"
        self.cache = workdir / "cache"
        self.home = workdir / "home"
        self.userconfig = workdir / "npmrc"
        self.globalconfig = workdir / "global-npmrc"
        self.registry = registry
        for directory in (self.project, self.cache, self.home):
            directory.mkdir(parents=True, exist_ok=True)
        self.userconfig.write_text(
            "omit-lockfile-registry-resolved=false\n"
            "fund=false\naudit=false\nupdate-notifier=false\nprogress=false\n"
            "fetch-retries=0\nloglevel=warn\n", encoding="utf-8")
        self.globalconfig.write_text("", encoding="utf-8")

    def authenticate(self, registry: str, token: str) -> None:
        """Send `token` to `registry` (and only there), as `npm login` would record it."""
        parts = urlsplit(registry)
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        with self.userconfig.open("a", encoding="utf-8") as npmrc:
            npmrc.write(f"//{parts.netloc}{path}:_authToken={token}\n")

    def clear_cache(self) -> None:
        """Empty npm's cache, so the next run fetches every packument and tarball again."""
        shutil.rmtree(self.cache, ignore_errors=True)
        self.cache.mkdir(parents=True)

    def write_project(self, dependencies: Mapping[str, str], *, name: str = "fixture-app",
                      **fields: Any) -> Path:
        """Write the project's package.json (and nothing else); returns the project dir."""
        manifest = {"name": name, "version": "1.0.0", "private": True,
                    "dependencies": dict(dependencies), **fields}
        (self.project / "package.json").write_text(json.dumps(manifest, indent=2) + "\n",
                                                   encoding="utf-8")
        return self.project

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if not key.lower().startswith(("npm_config_", "http_proxy", "https_proxy",
                                              "all_proxy", "no_proxy"))}
        env.update({"HOME": str(self.home), "NO_UPDATE_NOTIFIER": "1"})
        env.update(extra or {})
        return env

    def argv(self, args: Sequence[str], *, registry: str | None = None, scripts: bool = False,
             fetch_timeout: float | None = None, fetch_retries: int = 0) -> list[str]:
        npm = npm_executable()
        if npm is None:
            raise FileNotFoundError("npm is not on PATH")
        target = registry or self.registry
        if target is None:
            raise ValueError("no registry: set npm_client.registry or pass registry=")
        argv = [npm, *args,
                f"--userconfig={self.userconfig}", f"--globalconfig={self.globalconfig}",
                f"--cache={self.cache}", f"--registry={target}",
                f"--fetch-retries={fetch_retries}", "--no-audit", "--no-fund"]
        if fetch_retries:
            # npm's own back-off starts at 10 s; a test retrying through a 503 needs less
            argv += ["--fetch-retry-mintimeout=300", "--fetch-retry-maxtimeout=2000"]
        if not scripts:
            argv.append("--ignore-scripts")
        if args and args[0] in ("ci", "clean-install"):
            argv.append("--replace-registry-host=always")
        if fetch_timeout is not None:
            argv.append(f"--fetch-timeout={int(fetch_timeout * 1000)}")
        return argv

    def run(self, *args: str, registry: str | None = None, scripts: bool = False,
            fetch_timeout: float | None = None, fetch_retries: int = 0, timeout: float = 120.0,
            env: Mapping[str, str] | None = None, cwd: Path | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """`npm <args>` in the project directory; the completed process, stdout and stderr as
        text. `timeout` bounds the whole run (the process is killed past it)."""
        return subprocess.run(
            self.argv(args, registry=registry, scripts=scripts, fetch_timeout=fetch_timeout,
                      fetch_retries=fetch_retries),
            cwd=cwd or self.project, env=self.environment(env), capture_output=True,
            text=True, timeout=timeout, check=check, stdin=subprocess.DEVNULL)

    def install(self, *specs: str, **options: Any) -> subprocess.CompletedProcess[str]:
        """`npm install [specs]` (see `run` for the options)."""
        return self.run("install", *specs, **options)

    def ci(self, **options: Any) -> subprocess.CompletedProcess[str]:
        """`npm ci` from the project's lockfile, against this run's registry."""
        return self.run("ci", **options)

    def lockfile(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(
            (self.project / "package-lock.json").read_text(encoding="utf-8"))
        return document

    def installed(self) -> dict[str, str]:
        """name -> version of each package directly under the project's node_modules (what
        npm hoisted there: with no conflicting ranges, the whole tree)."""
        modules = self.project / "node_modules"
        if not modules.is_dir():
            return {}
        folders: list[Path] = []
        for entry in sorted(modules.iterdir()):
            if entry.name.startswith("@") and entry.is_dir():
                folders.extend(sorted(entry.iterdir()))
            elif not entry.name.startswith("."):
                folders.append(entry)
        found: dict[str, str] = {}
        for folder in folders:
            manifest = folder / "package.json"
            if manifest.is_file():
                data = json.loads(manifest.read_text(encoding="utf-8"))
                found[str(data.get("name"))] = str(data.get("version"))
        return found


@dataclass(frozen=True)
class NpmRun:
    code: int
    stdout: str
    stderr: str


NPM_RUN_LIMIT = 120.0
"""Seconds an npm run may take before it is killed and the test fails."""


async def npm(client: NpmClient, *args: str, registry: str) -> NpmRun:
    process = await asyncio.create_subprocess_exec(
        *client.argv(args, registry=registry), cwd=client.project,
        env=client.environment(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(NPM_RUN_LIMIT):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return NpmRun(process.returncode, stdout.decode(), stderr.decode())
