"""The two validators `mirrorgate sbom`'s documents are held to: CycloneDX 1.6's schema through
cyclonedx-python-lib's strict validator, and SPDX 2.3 through spdx-tools (the SPDX project's
parser and validator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.json.json_parser import parse_from_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

__all__ = ["valid_cyclonedx", "valid_spdx"]


def valid_cyclonedx(text: str) -> dict[str, Any]:
    """`text` as a document, once the CycloneDX 1.6 schema accepts it."""
    problem = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert problem is None, problem
    document: dict[str, Any] = json.loads(text)
    return document


def valid_spdx(path: Path) -> dict[str, Any]:
    """The SPDX 2.3 JSON document at `path`, once spdx-tools parses and validates it."""
    problems = validate_full_spdx_document(parse_from_file(str(path)), "SPDX-2.3")
    assert problems == [], [problem.validation_message for problem in problems]
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document
