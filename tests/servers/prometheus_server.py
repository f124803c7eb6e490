"""Prometheus itself on loopback: Debian's `prometheus` (the package that carries promtool),
scraping the targets a test names every second, queried over its HTTP API.

The alert rules' and the dashboard's queries are evaluated by the real engine against a real
mirrorgate's series (tests/e2e/test_metrics_named.py), not by a reimplementation. Started as a
context manager on a port chosen beforehand; ready when `/-/ready` answers 200. Missing, it is
`ServerUnavailableError` (a skip on a laptop, a failure under CI).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.servers.ports import free_port
from tests.servers.processes import CapturedProcess, ServerUnavailableError, http_request

__all__ = ["Prometheus"]

SCRAPE_SECONDS = 1


class Prometheus:
    """`Prometheus(root, {"proxy": "127.0.0.1:8080"})`: scrapes each target's `/metrics` as the
    job of its key, every second, and evaluates `rules` (a rules file) as often; `query` and
    `query_range` return the API's `data`."""

    def __init__(self, root: Path, targets: dict[str, str], rules: Path | None = None) -> None:
        self.root = root
        self.targets = targets
        self.rules = rules
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.process: CapturedProcess | None = None

    def __enter__(self) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            raise ServerUnavailableError("prometheus is not installed (Debian's prometheus "
                                         "package; scripts/test installs it as root)")
        self.root.mkdir(parents=True, exist_ok=True)
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            f"        labels: {{namespace: mirrorgate}}\n"
            for job, target in self.targets.items())
        config = self.root / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: {SCRAPE_SECONDS}s\n"
                          f"  evaluation_interval: {SCRAPE_SECONDS}s\n"
                          + (f"rule_files: ['{self.rules}']\n" if self.rules else "")
                          + f"scrape_configs:\n{jobs}", encoding="utf-8")
        self.process = CapturedProcess(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            env={"PATH": "/usr/bin:/bin"}, cwd=self.root)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise ServerUnavailableError(f"prometheus exited: {self.process.output()}")
            try:
                if http_request("GET", self.url + "-/ready", timeout=2).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.process.stop()
        raise ServerUnavailableError(f"prometheus was not ready in 20 s: "
                                     f"{self.process.output()}")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process is not None:
            self.process.stop()

    def _api(self, path: str, **params: str) -> Any:
        reply = http_request("GET", f"{self.url}api/v1/{path}?"
                             + urllib.parse.urlencode(params), timeout=30)
        answer = json.loads(reply.body)
        if answer.get("status") != "success":
            raise AssertionError(f"Prometheus refused {params}: {answer}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) `expr` gives now (or `at`)."""
        data = self._api("query", query=expr, **({"time": str(at)} if at else {}))
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float,
                    step: float = SCRAPE_SECONDS) -> list[dict[str, Any]]:
        data = self._api("query_range", query=expr, start=str(start), end=str(end),
                         step=str(step))
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's `label_values(match, label)` lists (the series API, not PromQL)."""
        found: list[str] = self._api(f"label/{label}/values", **{"match[]": match})
        return found

    def scraped(self) -> bool:
        """Every target answered its last scrape."""
        up = self.query("up")
        return len(up) == len(self.targets) and all(s["value"][1] == "1" for s in up)
