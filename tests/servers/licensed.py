"""Packages of real licenses, as their publishers' packers made them, for the license rule.

Five are registry tarballs kept in tests/npm/fixtures/registry, published long ago with their
own license files: MIT (content-type 1.0.5), ISC (inherits 2.0.1), BSD-3-Clause (samsam
1.3.0), a legacy `licenses` array (querystring-es3 0.2.1) and none at all (ms 0.7.1). The
others are packed by the real `npm pack` from a folder holding the license's text as Debian
ships it (/usr/share/common-licenses: Apache-2.0, GPL-2, GPL-3), or the publisher's own for
UNLICENSED and SEE LICENSE IN. Each version's registry manifest is its package.json, as
`npm publish` sends it; `lic-confused`'s manifest says MIT over a tarball that says GPL.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers.packages import (
    EPOCH,
    FixturePackage,
    FixtureVersion,
    build_tarball,
    default_dist_tags,
    make_version,
)

__all__ = ["LICENSED", "Licensed", "licensed_packages", "relicensed"]

REGISTRY = Path(__file__).parent.parent / "npm" / "fixtures" / "registry"
COMMON = Path("/usr/share/common-licenses")
CLASSPATH = """Linking this library statically or dynamically with other modules is making a
combined work based on this library. Thus, the terms and conditions of the GNU General Public
License cover the whole combination.

As a special exception, the copyright holders of this library give you permission to link this
library with independent modules to produce an executable, regardless of the license terms of
these independent modules, and to copy and distribute the resulting executable under terms of
your choice, provided that you also meet, for each linked independent module, the terms and
conditions of the license of that module. An independent module is a module which is not
derived from or based on this library. If you modify this library, you may extend this
exception to your version of the library, but you are not obligated to do so. If you do not
wish to do so, delete this exception statement from your version.
"""


@dataclass(frozen=True)
class Licensed:
    """A package of the set: its name, the license field its tarball declares (the legacy or
    missing ones as their package.json has them), and where its bytes come from."""

    name: str
    version: str
    declares: str
    source: str
    """A tarball of tests/npm/fixtures/registry, or `pack:` and the license file's text."""
    manifest_license: str | None = None
    """What the registry manifest says instead of the tarball's (manifest confusion)."""


def _pack(name: str, license_: str, text: str) -> str:
    return f"pack:{name}|{license_}|{text}"


LICENSED: tuple[Licensed, ...] = (
    Licensed("content-type", "1.0.5", "MIT", "content-type-1.0.5.tgz"),
    Licensed("inherits", "2.0.1", "ISC", "inherits-2.0.1.tgz"),
    Licensed("samsam", "1.3.0", "BSD-3-Clause", "samsam-1.3.0.tgz"),
    Licensed("querystring-es3", "0.2.1", "licenses: [MIT]", "querystring-es3-0.2.1.tgz"),
    Licensed("ms", "0.7.1", "(none)", "ms-0.7.1.tgz"),
    Licensed("lic-apache", "1.0.0", "Apache-2.0", "Apache-2.0"),
    Licensed("lic-gpl", "1.0.0", "GPL-3.0-only", "GPL-3"),
    Licensed("lic-dual", "1.0.0", "(MIT OR GPL-3.0-only)", "GPL-3"),
    Licensed("lic-both", "1.0.0", "MIT AND GPL-3.0-only", "GPL-3"),
    Licensed("lic-classpath", "1.0.0", "GPL-2.0-only WITH Classpath-exception-2.0", "GPL-2"),
    Licensed("lic-unlicensed", "1.0.0", "UNLICENSED", "proprietary"),
    Licensed("lic-see", "1.0.0", "SEE LICENSE IN LICENSE.md", "custom"),
    Licensed("lic-confused", "1.0.0", "GPL-3.0-only", "GPL-3", manifest_license="MIT"),
)


def _license_text(source: str) -> str:
    if source == "proprietary":
        return "Copyright (c) 2026 Acme Corp. All rights reserved. Not licensed for use.\n"
    if source == "custom":
        return ("# The Acme Source License\n\nYou may read this code. You may not run it in "
                "production without a written agreement with Acme Corp.\n")
    text = (COMMON / source).read_text(encoding="utf-8")
    return text + ("\n" + CLASSPATH if source == "GPL-2" else "")


def _packed(each: Licensed, workdir: Path) -> Path:
    folder = workdir / each.name
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"name": each.name, "version": each.version,
                "description": f"{each.name}: a package under {each.declares}",
                "main": "index.js", "license": each.declares}
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (folder / "index.js").write_text(f"module.exports = {json.dumps(each.name)};\n",
                                     encoding="utf-8")
    name = "LICENSE.md" if each.source == "custom" else "LICENSE"
    (folder / name).write_text(_license_text(each.source), encoding="utf-8")
    return folder


def _inner_manifest(tarball: bytes) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
        member = archive.extractfile("package/package.json")
        assert member is not None
        found: dict[str, Any] = json.load(member)
    return found


def licensed_packages(workdir: Path) -> dict[str, FixturePackage]:
    """Every package of `LICENSED`, by name: the registry ones read from their files, the
    others packed by `npm pack` into `workdir` in one run."""
    to_pack = [each for each in LICENSED if not each.source.endswith(".tgz")]
    folders = [_packed(each, workdir / "src") for each in to_pack]
    out = workdir / "packed"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(out),
                    *map(str, folders)], check=True, capture_output=True, text=True,
                   cwd=workdir, timeout=120)
    packages: dict[str, FixturePackage] = {}
    for each in LICENSED:
        path = (REGISTRY / each.source if each.source.endswith(".tgz")
                else out / f"{each.name}-{each.version}.tgz")
        tarball = path.read_bytes()
        manifest = _inner_manifest(tarball)  # what `npm publish` sends beside the bytes
        if each.manifest_license is not None:
            manifest["license"] = each.manifest_license
        version = FixtureVersion(manifest=manifest, published=EPOCH, explicit_tarball=tarball)
        versions = {each.version: version}
        packages[each.name] = FixturePackage(each.name, versions, default_dist_tags(versions))
    return packages


def relicensed(name: str, inside: str, shown: str = "MIT") -> FixtureVersion:
    """`name@1.0.0`, whose registry manifest declares `shown` over a package.json, inside its
    tarball of 512 KiB, declaring `inside`: manifest confusion over a license."""
    inner = {"name": name, "version": "1.0.0", "license": inside, "main": "index.js"}
    tarball = build_tarball({"package.json": json.dumps(inner).encode(),
                             "index.js": b"module.exports = 1\n",
                             "lib/data.bin": bytes(range(256)) * 2048})
    return make_version(name, "1.0.0", tarball=tarball, license=shown)
