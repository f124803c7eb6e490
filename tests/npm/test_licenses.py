"""The license a package declares, read by `npm.licenses` and by npm itself: `npm sbom` (npm
11's reading of `license`, a `license` object and a legacy `licenses` array) over a folder of
installed packages, each declaring its license one of the ways packages do, compared with
`declared_license` of the same package.json. Also the 23 real registry tarballs' manifests.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.npm.licenses import declared_license, license_file, unlicensed
from tests.servers.availability import unavailable

REGISTRY = Path(__file__).parent / "fixtures" / "registry"
DECLARATIONS: dict[str, dict[str, Any]] = {
    "a-string": {"license": "MIT"},
    "an-expression": {"license": "(MIT OR Apache-2.0)"},
    "an-object": {"license": {"type": "ISC", "url": "https://opensource.org/licenses/ISC"}},
    "an-array": {"licenses": [{"type": "MIT", "url": "x"}, {"type": "Apache-2.0"}]},
    "an-array-of-strings": {"licenses": ["MIT", "BSD-3-Clause"]},
    "both": {"license": "ISC", "licenses": [{"type": "MIT"}]},
    "an-empty-license": {"license": "", "licenses": [{"type": "MIT"}]},
    "an-array-in-license": {"license": [{"type": "MIT"}]},
    "licence-british": {"licence": "MIT"},
    "an-empty-array": {"licenses": []},
    "an-object-without-type": {"license": {"url": "https://example.com"}},
    "see-license": {"license": "SEE LICENSE IN LICENSE.md"},
    "unlicensed": {"license": "UNLICENSED"},
    "none": {},
}
# npm sbom's own departures, which mirrorgate does not follow: a `null` in `licenses` throws
# ("Cannot read properties of null"), a number is written as the license


def npm_reads(tmp_path: Path) -> dict[str, str | None]:
    """What `npm sbom --sbom-format spdx` declares for each of DECLARATIONS, installed."""
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is not on PATH; install Node.js 20+ with npm")
    project = tmp_path / "project"
    for name, fields in DECLARATIONS.items():
        folder = project / "node_modules" / name
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(json.dumps(
            {"name": name, "version": "1.0.0", **fields}), encoding="utf-8")
    (project / "package.json").write_text(json.dumps(
        {"name": "root", "version": "1.0.0",
         "dependencies": dict.fromkeys(DECLARATIONS, "1.0.0")}), encoding="utf-8")
    (tmp_path / "npmrc").write_text("", encoding="utf-8")
    environment = {key: value for key, value in os.environ.items()
                   if not key.lower().startswith("npm_config_")}
    done = subprocess.run(
        [npm, "sbom", "--sbom-format", "spdx", "--offline", f"--cache={tmp_path / 'cache'}",
         f"--userconfig={tmp_path / 'npmrc'}"], cwd=project, capture_output=True, text=True,
        check=True, timeout=120, env={**environment, "HOME": str(tmp_path)})
    document = json.loads(done.stdout)
    return {package["name"]: (None if package["licenseDeclared"] == "NOASSERTION"
                              else package["licenseDeclared"])
            for package in document["packages"] if package["name"] in DECLARATIONS}


def test_the_declared_license_is_the_one_npm_sbom_reads(tmp_path: Path) -> None:
    npm = npm_reads(tmp_path)

    mirrorgate = {name: declared_license(fields) for name, fields in DECLARATIONS.items()}
    assert mirrorgate == npm
    assert npm["an-array"] == "MIT OR Apache-2.0"  # the legacy array, as npm documents it


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(REGISTRY.glob("*.tgz")):
        with tarfile.open(fileobj=io.BytesIO(path.read_bytes())) as archive:
            for member in archive.getmembers():
                if member.name.count("/") == 1 and member.name.endswith("/package.json"):
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    found.append((path.name, json.load(extracted)))
                    break
    return found


@pytest.mark.parametrize(("tarball", "manifest"), manifests(), ids=lambda x: str(x)[:30])
def test_every_real_registry_tarball_declares_what_its_license_field_says(
        tarball: str, manifest: dict[str, Any]) -> None:
    declared = declared_license(manifest)
    if "license" in manifest:
        assert declared == manifest["license"]
    elif "licenses" in manifest:  # async 0.1.0, coffee-script 1.0.0, querystring-es3 0.2.1
        assert declared == "MIT"
    else:
        assert declared is None  # ms 0.7.1


def test_npms_words_for_no_grant_and_a_license_of_its_own() -> None:
    assert unlicensed("UNLICENSED")
    assert unlicensed("UNLICENCED")
    assert not unlicensed("Unlicense")  # an SPDX license (public domain), not npm's word
    assert license_file("SEE LICENSE IN LICENSE.md") == "LICENSE.md"
    assert license_file("SEE LICENCE IN ./legal/terms.txt") == "./legal/terms.txt"
    assert license_file("MIT") is None
