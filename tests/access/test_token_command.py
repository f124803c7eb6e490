"""`mirrorgate token new NAME` and `check-config` on a tokens file, as an operator runs them."""

from __future__ import annotations

from pathlib import Path

from mirrorgate.access.tokens import ClientTokens
from tests.servers.processes import run_command

ENV = {"PATH": "/usr/bin:/bin", "MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/"}


def test_token_new_prints_a_fresh_token_and_the_line_that_admits_it(tmp_path: Path) -> None:
    first = run_command("token", "new", "ci-builds", env=ENV)
    second = run_command("token", "new", "ci-builds", env=ENV)
    assert first.returncode == second.returncode == 0, first.stderr
    token, line = (first.stdout.splitlines()[i].strip() for i in (1, 3))
    tokens = tmp_path / "tokens"
    tokens.write_text(line + "\n")

    assert token not in line
    assert line.startswith("ci-builds sha256:")
    assert token != second.stdout.splitlines()[1].strip()
    matched = ClientTokens(tokens).match(token)
    assert matched is not None
    assert matched.name == "ci-builds"


def test_token_new_refuses_a_name_the_file_could_not_hold() -> None:
    done = run_command("token", "new", "two words", env=ENV)

    assert done.returncode == 2
    assert "the name 'two words' must be" in done.stderr
    assert done.stdout == ""


def test_check_config_refuses_a_tokens_file_naming_the_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# ok\nci sha256:{'0' * 64}\nbot sha256:{'1' * 64} deploy\n")

    done = run_command("check-config", env={**ENV,
                                            "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens)})

    assert done.returncode == 2
    assert "MIRRORGATE_CLIENT_TOKENS_FILE" in done.stderr
    assert "line 3: unknown permission 'deploy'" in done.stderr
