"""Server processes for the tests: the real `mirrorgate` command, and what drives any server.

Later suites start mirrorgate exactly as an operator would (the installed command, settings
only from the environment) and watch it from outside: `/readyz`, `/metrics`, its JSON log
lines, its exit status after SIGTERM. Decisions:

- A process starts from a minimal environment (PATH, a temporary HOME, JSON logs, free ports,
  and PYTHONPATH when the test run has one, so the child runs the same sources) plus what the
  test passes, so the developer's own variables and `~/.npmrc` never leak in.
  `MIRROR_POLL_WAIT_SECONDS` defaults to 1 here (not 20) so a worker notices SIGTERM quickly;
  a test about polling passes its own value.
- stdout and stderr are read by threads into memory as they arrive (a pipe nobody reads would
  block the child); log lines are parsed on demand, so a non-JSON line never breaks a test.
- Stopping is by the child's own pid: SIGTERM, a bounded wait, then SIGKILL.
- HTTP checks use a small urllib helper that never goes through a proxy and never raises on
  an HTTP status: helpers are synchronous, and that is fine because every server runs outside
  the test's event loop.
- `wait_for` polls a condition at a short interval with a deadline, instead of a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from prometheus_client.samples import Sample

from tests.metric_samples import metric_value, text_samples
from tests.servers.ports import free_port

__all__ = [
    "CapturedProcess",
    "MirrorgateProcess",
    "ProcessFailedError",
    "Reply",
    "ServerUnavailableError",
    "http_request",
    "mirrorgate_argv",
    "wait_for",
    "wait_for_async",
]

T = TypeVar("T")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerUnavailableError(Exception):
    """A helper server (Verdaccio, npm...) is not installed or did not start: the fixtures
    make this a failure under CI and a skip elsewhere."""


class ProcessFailedError(AssertionError):
    """mirrorgate did not start or stop as expected; the message carries its stderr."""


# -- waiting --------------------------------------------------------------------------------

def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
             message: str | None = None) -> T:
    """Call `predicate` until it returns something truthy, and return that; after `timeout`
    seconds, fail with `message`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for "
                                 f"{message or getattr(predicate, '__name__', 'a condition')}")
        time.sleep(interval)


async def wait_for_async(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = 10.0,  # noqa: ASYNC109  # a polling deadline, the same as wait_for's
    interval: float = 0.05,
    message: str | None = None,
) -> T:
    """`wait_for` for async tests: the predicate is a coroutine function, and the test's loop
    keeps running between polls (use `wait_for` for a plain predicate: every server runs
    outside the test's loop, so blocking it between polls is harmless)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for "
                                 f"{message or getattr(predicate, '__name__', 'a condition')}")
        await asyncio.sleep(interval)


async def until(predicate: Callable[[], object], timeout: float = 10.0,  # noqa: ASYNC109 - a polling deadline
                interval: float = 0.01) -> None:
    """`wait_for` for a plain condition in an async test: poll while the test's loop keeps
    running (the condition may depend on tasks in that loop); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {predicate}")
        await asyncio.sleep(interval)


# -- HTTP -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(method: str, url: str, *, body: bytes | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float = 10.0) -> Reply:
    """One HTTP request, no proxy; any status is a `Reply`. A connection failure raises
    `OSError` (`urllib.error.URLError` is one)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    # S310: the scheme is checked just above; only http(s) reaches urllib.
    request = urllib.request.Request(  # noqa: S310
        url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return Reply(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        with error:
            return Reply(error.code, dict(error.headers.items()), error.read())


# -- processes ------------------------------------------------------------------------------

class CapturedProcess:
    """A child process whose stdout and stderr are collected line by line, stopped by pid."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        self.argv = list(argv)
        self._lock = threading.Lock()
        self._out: list[str] = []
        self._err: list[str] = []
        self.popen = subprocess.Popen(
            self.argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self._readers = [
            threading.Thread(target=self._read, args=(stream, sink), daemon=True)
            for stream, sink in ((self.popen.stdout, self._out), (self.popen.stderr, self._err))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[bytes] | None, sink: list[str]) -> None:
        if stream is None:
            return
        with stream:
            for raw in stream:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                with self._lock:
                    sink.append(line)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def stdout_lines(self) -> list[str]:
        with self._lock:
            return list(self._out)

    def stderr_lines(self) -> list[str]:
        with self._lock:
            return list(self._err)

    def output(self) -> str:
        """Everything the process wrote so far, stderr then stdout, for failure messages."""
        return "\n".join(self.stderr_lines() + self.stdout_lines())

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signum)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM; SIGKILL if it has not exited within `timeout`. Returns the exit status."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int:
        self.signal(signal.SIGKILL)
        return self.wait(10)


OFFLINE: dict[str, str] = {"MIRRORGATE_MALWARE_FEED": "off"}
"""What every mirrorgate a test starts is given, so that nothing in the tests reaches the
internet: the known-malware feed's default is OSV's public export. A test of the feed sets its
own (a local copy, or an https server on loopback)."""


def mirrorgate_argv() -> list[str]:
    """The installed `mirrorgate` command next to this interpreter, else `python -m`."""
    script = Path(sys.executable).parent / "mirrorgate"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "mirrorgate"]


class MirrorgateProcess:
    """The real `mirrorgate serve | serve --no-worker | worker` in a subprocess.

    `url` is the proxy's base URL and `registry_url` what an npm client is pointed at
    (`.../npm/`); `health_url` is the listener with /livez, /readyz and /metrics (the proxy's
    for `serve`, MIRRORGATE_WORKER_LISTEN's for `worker`).
    """

    def __init__(self, command: str = "serve", env: Mapping[str, str] | None = None, *,
                 workdir: Path | None = None) -> None:
        self.args = shlex.split(command)
        if not self.args or self.args[0] not in ("serve", "worker"):
            raise ValueError(f"not a mirrorgate server command: {command!r}")
        self._own_workdir = workdir is None
        self.workdir = workdir if workdir is not None else Path(tempfile.mkdtemp(
            prefix="mirrorgate-"))
        self.home = self.workdir / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        listen, worker_listen = free_port(), free_port()
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "MIRRORGATE_LOG_FORMAT": "json",
            "MIRRORGATE_LISTEN": f"127.0.0.1:{listen}",
            "MIRRORGATE_WORKER_LISTEN": f"127.0.0.1:{worker_listen}",
            "MIRRORGATE_DATA_DIR": str(self.workdir / "data"),
            "MIRROR_POLL_WAIT_SECONDS": "1",
            **OFFLINE,
        }
        if "PYTHONPATH" in os.environ:
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        self.env.update(env or {})
        self.process: CapturedProcess | None = None

    @property
    def command(self) -> str:
        return " ".join(self.args)

    def _address(self, variable: str) -> str:
        return "http://" + self.env[variable] + "/"

    @property
    def url(self) -> str:
        return self._address("MIRRORGATE_LISTEN")

    @property
    def registry_url(self) -> str:
        return self.url + "npm/"

    @property
    def health_url(self) -> str:
        worker = self.args[0] == "worker"
        return self._address("MIRRORGATE_WORKER_LISTEN" if worker else "MIRRORGATE_LISTEN")

    @property
    def running(self) -> CapturedProcess:
        if self.process is None:
            raise ProcessFailedError(f"mirrorgate {self.command} was never started")
        return self.process

    @property
    def pid(self) -> int:
        return self.running.pid

    @property
    def returncode(self) -> int | None:
        return self.running.returncode

    def start(self, ready: bool = True, timeout: float = 15.0) -> MirrorgateProcess:
        """Start the command; with `ready`, wait until /readyz answers 200 (or fail with the
        process's stderr if it exits first or `timeout` passes)."""
        self.process = CapturedProcess([*mirrorgate_argv(), *self.args], env=self.env,
                                       cwd=self.workdir)
        if ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        process = self.running
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.returncode is not None:
                code = process.wait(5)
                raise ProcessFailedError(f"mirrorgate {self.command} exited with status {code} "
                                    f"before /readyz answered 200:\n{process.output()}")
            try:
                if self.get("readyz", timeout=1).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        process.kill()
        raise ProcessFailedError(f"mirrorgate {self.command} did not answer /readyz with 200 "
                                 f"within {timeout:g}s:\n{process.output()}")

    def get(self, path: str, *, headers: Mapping[str, str] | None = None,
            timeout: float = 10.0) -> Reply:
        """GET a path on the health listener (`livez`, `readyz`, `metrics`)."""
        return http_request("GET", self.health_url + path.lstrip("/"), headers=headers,
                            timeout=timeout)

    # -- observing -----------------------------------------------------------------------

    def stderr(self) -> str:
        return "\n".join(self.running.stderr_lines())

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON object logged on stderr so far, in order; other lines are left out."""
        parsed: list[dict[str, Any]] = []
        for line in self.running.stderr_lines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                parsed.append(entry)
        return parsed

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log lines whose `event` is `name`."""
        return [entry for entry in self.logs() if entry.get("event") == name]

    def metrics(self) -> dict[str, float]:
        """The /metrics samples, keyed `name{label="value",...}` (labels sorted; no braces
        when there are none)."""
        samples: dict[str, float] = {}
        for sample in self._samples():
            shown = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{shown}}}" if shown else sample.name] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels` (0.0 before the
        first increment); an unknown metric, label or value fails (`metric_value`)."""
        return metric_value(self._samples(), name, **labels)

    def _samples(self) -> list[Sample]:
        reply = self.get("metrics")
        if reply.status != 200:
            raise ProcessFailedError(f"/metrics answered {reply.status}: {reply.body[:500]!r}")
        return text_samples(reply.body.decode())

    # -- stopping ------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        self.running.signal(signum)

    def wait(self, timeout: float = 40.0) -> int:
        try:
            return self.running.wait(timeout)
        except subprocess.TimeoutExpired:
            self.running.kill()
            raise ProcessFailedError(f"mirrorgate {self.command} did not exit within {timeout:g}s; "
                                f"killed:\n{self.running.output()}") from None

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM and wait for the exit status (a graceful stop drains for up to
        MIRRORGATE_DRAIN_TIMEOUT); SIGKILL and fail if it takes longer than `timeout`."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        finally:
            self._clean_up()

    def kill(self) -> int:
        try:
            return self.running.kill()
        finally:
            self._clean_up()

    def _clean_up(self) -> None:
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def run_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # the sources under test (PYTHONPATH), not whatever the installed command points at
    if env is not None:
        env = {**OFFLINE, **env}
    if env is not None and "PYTHONPATH" in os.environ:
        env = {"PYTHONPATH": os.environ["PYTHONPATH"], **env}
    return subprocess.run([*mirrorgate_argv(), *args], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
