"""The "Clients" section of docs/serving.md shows the configuration the client matrix runs, and
what the clients printed there for a denied version.

The drivers (`tests.servers.package_managers`) write each project's file from
`tests.servers.client_config`; here the same templates are rendered for the docs' example
host and must appear as a code block, and each line the matrix expects from a client for a
denied version must appear in the section's table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.servers.client_config import (
    CLIENT_CONFIGS,
    DENIED_SAYS,
    LOCKED_DENIED_SAYS,
    render,
    says,
)

SERVING = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
EXAMPLE = "http://mirrorgate.internal:8080/npm/"
FENCED = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def section() -> str:
    start = SERVING.index("\n## Clients\n")
    return SERVING[start:SERVING.index("\n## ", start + 1)]


@pytest.mark.parametrize("client", sorted(CLIENT_CONFIGS))
def test_the_docs_show_the_config_files_the_tests_write_for(client: str) -> None:
    blocks = FENCED.findall(section())

    for file in CLIENT_CONFIGS[client]:
        assert render(file, EXAMPLE) in blocks
        shown = f"`~/{file.filename}`" if file.place == "home" else f"`{file.filename}`"
        assert shown in section()


@pytest.mark.parametrize("client", sorted(DENIED_SAYS))
def test_the_docs_show_what_the_client_prints_for_a_denied_version(client: str) -> None:
    rows = [line for line in section().splitlines() if line.startswith("| ")]
    shown = {"yarn1": "yarn 1", "yarn4": "yarn 4"}.get(client, client)
    row = next(line for line in rows if line.startswith(f"| {shown} |"))

    for template in (DENIED_SAYS[client], LOCKED_DENIED_SAYS[client]):
        assert f"`{says(template, EXAMPLE, 'left-pad', '1.3.0', 'deny-list')}`" in row
