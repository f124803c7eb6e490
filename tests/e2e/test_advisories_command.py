"""The advisory gate in the real `mirrorgate` command: readiness never waits for the data,
the load is observable in logs and metrics, and `check-config` says whether the source reads.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.advisories.records import fixture_records, write_zip
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.packages import make_package
from tests.servers.processes import mirrorgate_argv, wait_for


def rules_file(tmp_path: Path, source: Path, unavailable: str = "admit") -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(f'[advisories]\nsource = "{source}"\nunavailable = "{unavailable}"\n',
                    encoding="utf-8")
    return path


def test_serve_is_ready_without_advisory_data_under_admit_and_counts_the_failed_load(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    public_registry.add(make_package("adv-evil", ["1.0.0"]))
    rules = rules_file(tmp_path, tmp_path / "not-yet-synced.zip")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_RULES_FILE": str(rules)})

    assert proxy.get("readyz").status == 200
    wait_for(lambda: proxy.events("advisories_load_failed"))
    assert proxy.metric("mirrorgate_advisory_loads_total", outcome="failed") == 1
    assert proxy.metric("mirrorgate_advisory_records") == 0
    assert proxy.get("npm/adv-evil").status == 200  # admitted: no data, and "admit"


def test_serve_loads_the_export_in_the_background_and_denies_malware(
    mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    public_registry.add(make_package("adv-evil", ["1.0.0"]))
    export = write_zip(tmp_path / "osv-npm.zip", fixture_records())
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_RULES_FILE": str(rules_file(tmp_path, export))})

    wait_for(lambda: proxy.events("advisories_loaded"))
    assert proxy.metric("mirrorgate_advisory_records") == 7
    assert proxy.metric("mirrorgate_advisory_age_seconds") < 600
    reply = proxy.get("npm/adv-evil/-/adv-evil-1.0.0.tgz")
    assert reply.status == 403
    assert "MAL-2026-1001" in reply.json()["error"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="advisory-malware") == 1


def check_config(rules: Path, public: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*mirrorgate_argv(), "check-config", "--json"], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "MIRRORGATE_PUBLIC_UPSTREAM": public,
                               "MIRRORGATE_RULES_FILE": str(rules),
                               # the sources under test, not the installed command's
                               **({"PYTHONPATH": os.environ["PYTHONPATH"]}
                                  if "PYTHONPATH" in os.environ else {})})


def test_check_config_prints_the_advisory_settings_and_that_the_source_reads(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    export = write_zip(tmp_path / "osv-npm.zip", fixture_records())
    done = check_config(rules_file(tmp_path, export, "deny"), public_registry.url)
    assert done.returncode == 0, done.stderr
    advisories = json.loads(done.stdout)["rules"]["advisories"]
    assert advisories == {
        "source": str(export), "refresh": "1 hour", "malware": "deny", "severity": "high",
        "unavailable": "deny", "max_age": "3 days", "ignore": [], "fast_lane": True,
        "by_default": False, "readable": {"ok": True, "detail": "a zip of 9 JSON records"},
    }


def test_check_config_warns_when_the_source_cannot_be_read_and_still_exits_0(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    broken = tmp_path / "osv-npm.zip"
    broken.write_bytes(b"PK\x03\x04 truncated")
    done = check_config(rules_file(tmp_path, broken), public_registry.url)
    assert done.returncode == 0, done.stderr
    assert "the advisory source is not readable" in done.stderr
    assert json.loads(done.stdout)["rules"]["advisories"]["readable"]["ok"] is False
