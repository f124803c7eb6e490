"""One statement of the default policy, and `check-config` for a person.

The report that started this: `--help` and docs/configuration.md said a missing rules file
means "only the integrity-presence rule", `check-config` and docs/serving.md said a one-day
cooldown runs, the README said nothing. The statement is now made from `DEFAULT_RULES`
(`rules.inforce`), and every place a person reads it is checked against it here.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.__main__ import main
from mirrorgate.configdoc import render
from mirrorgate.rules import DEFAULT_RULES, evaluate
from mirrorgate.rules.inforce import DEFAULT_POLICY, in_force
from mirrorgate.store.schema import LATEST
from tests.servers.packages import make_version

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith(("MIRRORGATE_", "MIRROR_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MIRRORGATE_PUBLIC_UPSTREAM", "http://127.0.0.1:9/")
    monkeypatch.setenv("MIRRORGATE_DATA_DIR", str(tmp_path / "data"))
    # the known-malware feed off: check-config would otherwise ask OSV's host whether it
    # answers (tests reach only loopback; tests/e2e/test_known_malware.py runs the feed)
    monkeypatch.setenv("MIRRORGATE_MALWARE_FEED", "off")


def test_the_statement_names_exactly_the_rules_that_deny_without_a_rules_file() -> None:
    young = make_version("fresh", "1.0.0", published=NOW - timedelta(hours=2))
    bare = make_version("bare", "1.0.0", published=NOW - timedelta(days=30), digests="none")
    fired = {evaluate(DEFAULT_RULES, v.name, v.version, v.document("http://u/"),
                      v.published.isoformat(), NOW).rule for v in (young, bare)}

    assert fired == {"minimum-age", "integrity-presence"}
    named = {line.split(":")[0] for line in in_force(DEFAULT_RULES)}
    # the other three read the bytes at a first pull, not the packument (tests/e2e/
    # test_capabilities.py refuses each incident shape with no rules file, and tests/e2e/
    # test_release_unread.py what it cannot read as npm does)
    assert named == fired | {"new-capability", "young-package-capability",
                             "unreadable-release"}
    assert "1 day old" in DEFAULT_POLICY
    # and known malware, from the feed MIRRORGATE_MALWARE_FEED adds unless it is off
    assert "advisory-malware: a version that a known-malware record (MAL-)" in DEFAULT_POLICY


def test_the_readme_and_the_configuration_reference_state_the_generated_policy() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")

    assert f"> {DEFAULT_POLICY}\n" in readme
    assert f"\n{DEFAULT_POLICY}\n" in render()
    assert f"\n{DEFAULT_POLICY}\n" in reference
    assert "only the integrity-presence rule" not in readme + reference


def test_help_states_the_generated_policy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])

    assert flat(DEFAULT_POLICY) in flat(capsys.readouterr().out)


def test_check_config_summarises_for_a_person_with_problems_first(
    environment: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MIRRORGATE_RULE_FILE", "/etc/mirrorgate/rules.toml")  # a typo

    assert main(["check-config"]) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == "problems (1):"
    assert "MIRRORGATE_RULE_FILE is set but mirrorgate does not read it" in out[1]
    assert out[2] == ("registry   http://127.0.0.1:8080/npm/ (give it to npm: npm install "
                      "--registry http://127.0.0.1:8080/npm/)")
    assert out[3] == "status     http://127.0.0.1:8080/ui/"
    labels = [line.split(" ")[0] for line in out if line and not line.startswith(" ")]
    assert labels[3:12] == ["store", "state", "waivers", "queue", "upstreams", "data", "rules",
                            "exceptions", "advisories"]
    [state] = [line for line in out if line.startswith("state ")]
    assert "sqlite at " in state
    assert f"state.sqlite3 (not created yet; this release migrates it to {LATEST})" in state
    rules = out.index("rules      the default policy (no MIRRORGATE_RULES_FILE): 5 rules can "
                      "deny a version")
    assert out[rules + 1:rules + 6] == [f"           - {line}" for line in in_force(DEFAULT_RULES)]
    assert len(out) < 25  # it was 153 lines of JSON


def test_check_config_json_is_the_whole_document_with_the_rules_in_force(
    environment: None, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-config", "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["rules_in_force"] == in_force(DEFAULT_RULES)
    assert report["rules"]["age"]["minimum"] == "1 day"
    assert report["settings"]["listen"] == "127.0.0.1:8080"
