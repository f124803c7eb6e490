"""The Pub/Sub skip made visible: a machine without the emulator skips its tests and says so in
the run's last lines under CI; a machine expected to have one fails under CI when it is not
there (a mistyped PUBSUB_EMULATOR_BIN), rather than passing with 36 tests quietly skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.servers.pubsub_server import look_for_emulator

ROOT = Path(__file__).resolve().parents[2]
# the repository for `tests.conftest`, then whatever sources this run imports mirrorgate from
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def pytest_run(*args: str, env: dict[str, str],
               cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items()
             if key not in {"CI", "PUBSUB_EMULATOR_BIN", "PYTEST_ADDOPTS"}
             and not key.startswith("PYTEST_XDIST")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          env={**clean, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def launcher(tmp_path: Path) -> Path:
    path = tmp_path / "cloud-pubsub-emulator"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_standard_path_or_the_variable_finds_the_emulator(tmp_path: Path) -> None:
    found = look_for_emulator(None, default=launcher(tmp_path))
    assert found.launcher == tmp_path / "cloud-pubsub-emulator"
    assert found.expected
    assert look_for_emulator(str(launcher(tmp_path)), default=tmp_path / "no").launcher


def test_a_machine_without_the_emulator_does_not_expect_it(tmp_path: Path) -> None:
    found = look_for_emulator(None, default=tmp_path / "absent")
    assert found.launcher is None
    assert not found.expected
    assert "Pub/Sub emulator not found" in found.reason


def test_a_mistyped_variable_is_expected_and_says_what_to_fix(tmp_path: Path) -> None:
    found = look_for_emulator(str(tmp_path / "typo"), default=launcher(tmp_path))
    assert found.launcher is None
    assert found.expected  # the standard path holding one does not rescue a wrong variable
    assert f"PUBSUB_EMULATOR_BIN={tmp_path / 'typo'} is not an executable file" in found.reason


def test_under_ci_a_wrong_emulator_variable_fails_the_pubsub_tests(tmp_path: Path) -> None:
    run = pytest_run("-q", "tests/queue/test_pubsub_specifics.py", "-k", "deadline",
                     env={"CI": "1", "PUBSUB_EMULATOR_BIN": str(tmp_path / "typo")})
    assert run.returncode == 1, run.stdout[-3000:]
    assert "is not an executable file" in run.stdout
    assert " skipped" not in run.stdout.splitlines()[-1]


def test_without_ci_a_wrong_emulator_variable_skips_with_the_reason(tmp_path: Path) -> None:
    run = pytest_run("-q", "-rs", "tests/queue/test_pubsub_specifics.py", "-k", "deadline",
                     env={"PUBSUB_EMULATOR_BIN": str(tmp_path / "typo")})
    assert run.returncode == 0, run.stdout[-3000:]
    assert "is not an executable file" in run.stdout
    assert " skipped" in run.stdout.splitlines()[-1]


def test_under_ci_the_last_lines_count_the_skips_and_give_each_reason(tmp_path: Path) -> None:
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', range(3))\n"
        "def test_needs_the_emulator(n):\n"
        "    pytest.skip('Pub/Sub emulator not found at /nowhere')\n"
        "def test_other():\n"
        "    pytest.skip('no npm here')\n"
        "def test_runs():\n"
        "    pass\n")
    run = pytest_run("-q", "-ra", "-p", "tests.conftest", "--rootdir", str(tmp_path),
                     str(tmp_path / "test_skips.py"), env={"CI": "1", "PYTHONPATH": PYTHONPATH},
                     cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:]
    last = run.stdout.strip().splitlines()[-4:]
    assert "4 skipped under CI" in last[0]
    assert last[1:3] == ["3 skipped: Pub/Sub emulator not found at /nowhere",
                         "1 skipped: no npm here"]
    assert "1 passed, 4 skipped" in last[3]

    quiet = pytest_run("-q", "-p", "tests.conftest", "--rootdir", str(tmp_path),
                       str(tmp_path / "test_skips.py"), env={"PYTHONPATH": PYTHONPATH},
                       cwd=tmp_path)
    assert "skipped under CI" not in quiet.stdout


def test_scripts_test_stops_before_anything_when_the_emulator_variable_is_wrong(
        tmp_path: Path) -> None:
    run = subprocess.run([str(ROOT / "scripts" / "test")], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False,
                         env={**os.environ, "CI": "1", "PUBSUB_EMULATOR_BIN": str(tmp_path / "x")})
    assert run.returncode == 2
    assert f"PUBSUB_EMULATOR_BIN={tmp_path / 'x'} is not an executable file" in run.stderr
