"""DataDog's GuardDog over one tarball, as a user runs it: `guarddog npm scan FILE
--output-format json`, a process per tarball, its CPU read from the kernel's account of the
process and its children (`os.wait4`), its verdict at each of its thresholds.

GuardDog lives in an environment of its own, never the project's:
`python3 -m venv /work/guarddog-venv && /work/guarddog-venv/bin/pip install guarddog`; the
bench is given its executable (`--guarddog`). It only reads the tarball (it unpacks it in its
own sandbox; nothing is installed or run). Results are kept per tarball (by its sha256) in
the bench's cache, so a rerun of mirrorgate's side does not scan again.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["THRESHOLDS", "Scanned", "flagged", "scan", "version_of"]

THRESHOLDS = ("any rule", "suspicious or worse", "high risk")
"""GuardDog's verdicts, loosest first: a finding of any rule; its risk score's label
`suspicious` or `high_risk` (score 5 and over); `high_risk` alone (7 and over)."""
_LABELS = {"suspicious or worse": ("suspicious", "high_risk"), "high risk": ("high_risk",)}
TIMEOUT = 600.0


@dataclass(frozen=True)
class Scanned:
    """What GuardDog said of one tarball: its risk label, how many findings, which rules,
    the CPU of its process, and an error when it could not scan."""

    label: str
    issues: int
    rules: tuple[str, ...]
    cpu: float
    error: str | None = None


def flagged(scanned: Scanned, threshold: str) -> bool:
    if threshold == "any rule":
        return scanned.issues > 0
    return scanned.label in _LABELS[threshold]


def version_of(executable: str) -> str:
    """GuardDog's version, as its environment's pip records it."""
    python = Path(executable).with_name("python")
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                            "print(m.version('guarddog'))"], capture_output=True, text=True,
                           check=False)
    return found.stdout.strip() or "unknown"


def _read(output: str) -> tuple[str, int, tuple[str, ...]]:
    document: dict[str, Any] = json.loads(output)
    results = document.get("results") or {}
    rules = tuple(sorted(rule for rule, found in results.items() if found))
    label = str((document.get("risk_score") or {}).get("label") or "no_risks_detected")
    return label, int(document.get("issues") or 0), rules


def scan(executable: str, tarball: Path, cache: Path) -> Scanned:
    """GuardDog's verdict on `tarball` (named by its sha256, as the bench stores them), from
    the cache when it was scanned before."""
    kept = cache / f"{tarball.stem}.json"
    if kept.exists():
        data = json.loads(kept.read_text(encoding="utf-8"))
        return Scanned(data["label"], data["issues"], tuple(data["rules"]), data["cpu"])
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([executable, "npm", "scan", str(tarball),
                                    "--output-format", "json"],
                                   stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        started = time.monotonic()
        while True:  # wait4: this child's CPU alone, whatever else runs beside it
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > TIMEOUT:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.02)
        process.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        out.seek(0)
        err.seek(0)
        output, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    try:
        label, issues, rules = _read(output)
        scanned = Scanned(label, issues, rules, cpu)
    except (ValueError, TypeError, AttributeError):
        last = [line for line in errors.splitlines() if line.strip()][-1:] or ["no output"]
        scanned = Scanned("error", 0, (), cpu, f"exit {process.returncode}: {last[0][:300]}")
    if scanned.error is None:
        kept.write_text(json.dumps(asdict(scanned)), encoding="utf-8")
    return scanned
