"""What npm runs for a young package's release, read as npm reads it or refused, under the
default policy (no rules file: the capability signals read every first pull's bytes, issue
55), through the real npm client, a real `mirrorgate serve` and Verdaccio (issue 53).

The attacks: a `postinstall` that only the tarball's package.json carries, in a tarball
mirrorgate could not read (a package.json over 1 MiB; a pax size unlike the ustar size) and
npm unpacks, was served on the strength of the registry's manifest; eight shapes of bomb
were bounded and then served unread; a young release with no hook of its own that installs
a git dependency (npm runs its `prepare`) or a tarball URL (npm runs its `postinstall`) was
served. Each is refused now; a young release with ordinary registry dependencies, and the
readable forms of the same shapes, are admitted or refused as before.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mirrorgate.npm.tarscripts import MAX_MANIFEST_BYTES
from tests.e2e.test_release_attacks import git_repository, install, start
from tests.npm.bombs import BOMBS
from tests.npm.tarshapes import END, data_blocks, file, header, pax
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import FixturePackage, make_package, make_version
from tests.servers.processes import MirrorgateProcess
from tests.servers.verdaccio import Verdaccio

TWO_DAYS_AGO = datetime.now(UTC) - timedelta(days=2)
"""Past the default one-day cooldown, a package younger than the signal's 30 days."""


def _hooked(name: str, marker: Path, pad_to: int = 0) -> bytes:
    """`name`'s package.json with a `postinstall` that writes `marker`, padded with a
    description to `pad_to` bytes."""
    document = {"name": name, "version": "1.0.0", "description": "",
                "scripts": {"postinstall": f"node -e \"require('fs').writeFileSync("
                                           f"'{marker}', 'ran')\""}}
    text = json.dumps(document).encode()
    if pad_to:
        document["description"] = "d" * (pad_to - len(text))
        text = json.dumps(document).encode()
    return text


def over_a_mib(name: str, marker: Path) -> bytes:
    """The package.json is 1 MiB and one byte: npm reads it whole, mirrorgate's bound stops."""
    return gzip.compress(file("package/package.json", _hooked(
        name, marker, MAX_MANIFEST_BYTES + 1)) + END, mtime=0)


def pax_size(name: str, marker: Path) -> bytes:
    """The package.json's pax size is its own, its ustar size 0: node-tar reads the pax one."""
    document = _hooked(name, marker)
    return gzip.compress(pax([("size", str(len(document)))]) + header("package/package.json", 0)
                         + data_blocks(document) + END, mtime=0)


def readable(name: str, marker: Path) -> bytes:
    """The same postinstall in a package.json just under the bound, in plain ustar."""
    return gzip.compress(file("package/package.json", _hooked(
        name, marker, MAX_MANIFEST_BYTES - 1024)) + END, mtime=0)


def young(name: str, tarball: bytes | None = None,
          dependencies: dict[str, str] | None = None) -> FixturePackage:
    """`name@1.0.0`, first published two days ago; its registry manifest runs nothing."""
    dist = {"fileCount": 1, "unpackedSize": 1} if tarball is not None else None
    return make_package(name, [make_version(name, "1.0.0", dependencies, tarball=tarball,
                                            published=TWO_DAYS_AGO, dist=dist)])


def straight_from_public(npm: NpmClient, public: FixtureRegistry, name: str,
                         scripts: bool = False) -> Path:
    """Install `name` with npm from the public registry itself (no mirrorgate), then leave
    the project as it was; returns where npm put the package, kept aside."""
    npm.write_project({name: "^1.0.0"})
    direct = npm.install(registry=public.url, scripts=scripts)
    assert direct.returncode == 0, direct.stderr
    kept = npm.workdir / f"direct-{name}"
    shutil.move(npm.project / "node_modules" / name, kept)
    shutil.rmtree(npm.project / "node_modules")
    (npm.project / "package-lock.json").unlink()
    return kept


def refused_with(npm: NpmClient, proxy: MirrorgateProcess, name: str, rule: str) -> str:
    """Install `name`: E403 naming `rule`; the refusal's reason as the proxy logged it."""
    answer = install(npm, proxy, {name: "^1.0.0"})
    assert answer.returncode != 0, answer.stdout
    assert "E403" in answer.stderr, answer.stderr[-2000:]
    assert rule in answer.stderr
    [refusal] = [event for event in proxy.events("release_signal_refused")
                 if event["package"] == name]
    assert refusal["rule"] == rule
    reason: str = refusal["reason"]
    return reason


@pytest.mark.parametrize(("shape", "why"), [
    (over_a_mib, "a package.json is larger than 1048576 bytes"),
    (pax_size, "a pax header's size is not the entry's ustar size"),
], ids=["package-json-over-1-mib", "pax-size-unlike-ustar"])
def test_a_postinstall_mirrorgate_cannot_read_and_npm_unpacks_is_refused_as_unreadable(
    shape: object, why: str, public_registry: FixtureRegistry, verdaccio: Verdaccio,
    npm_client: NpmClient, mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    assert callable(shape)
    marker = tmp_path / "ran"
    public_registry.add(young("hidden-hook", shape("hidden-hook", marker)),
                        young("plain-hook", readable("plain-hook", marker)),
                        young("no-hook", gzip.compress(file("package/package.json", json.dumps(
                            {"name": "no-hook", "version": "1.0.0"}).encode()) + END)))

    # npm, straight from the public registry, unpacks the postinstall the manifest lacks
    unpacked = straight_from_public(npm_client, public_registry, "hidden-hook")
    assert "postinstall" in json.loads((unpacked / "package.json").read_bytes())["scripts"]

    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)
    reason = refused_with(npm_client, proxy, "hidden-hook", "unreadable-release")
    assert why in reason
    assert 'add "hidden-hook@1.0.0" (or "hidden-hook") to release.allow' in reason
    # the readable form of the same hook: read, and judged by what it can do (a file written
    # in the temporary folder: nothing young-package-capability holds), so admitted; the
    # refusal above is the unreadable tarball's, not the hook's
    plain = install(npm_client, proxy, {"plain-hook": "^1.0.0"})
    assert plain.returncode == 0, plain.stderr
    assert not [event for event in proxy.events("release_signal_refused")
                if event["package"] == "plain-hook"]
    [checked] = [event for event in proxy.events("release_checked")
                 if event["package"] == "plain-hook"]
    assert "young-package-capability" not in checked["signals"]
    # a young release that runs nothing: admitted
    admitted = install(npm_client, proxy, {"no-hook": "^1.0.0"})
    assert admitted.returncode == 0, admitted.stderr
    assert not marker.exists()


def test_the_eight_bomb_shapes_are_refused_as_unreadable_by_default(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    names = {shape: f"bomb-{shape}" for shape in BOMBS}
    public_registry.add(*(young(name, BOMBS[shape](_hooked(name, marker)))
                          for shape, name in names.items()))
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    reasons = {shape: refused_with(npm_client, proxy, name, "unreadable-release")
               for shape, name in names.items()}

    assert "compression bomb" in reasons["zstd-rle"]
    assert "ends inside an entry" in reasons["lying-size"]
    assert "zstd stream does not decompress" in reasons["zstd-2-gib-window"]
    assert "compression bomb" in reasons["gzip-bomb"]
    assert "nests deeper" in reasons["deep-package-json"]
    assert "more than 200000 entries" in reasons["million-entries"]
    assert "compression bomb" in reasons["pax-400-mib"]
    assert "more than 4096 gzip members or zstd frames" in reasons["zstd-empty-frames"]
    assert not marker.exists()


def payload(name: str, marker: Path) -> FixturePackage:
    """A package whose postinstall writes `marker` (its registry manifest says so too)."""
    hook = f"node -e \"require('fs').writeFileSync('{marker}', 'ran')\""
    return make_package(name, [make_version(name, "1.0.0", published=TWO_DAYS_AGO,
                                            scripts={"postinstall": hook})])


def prepared(where: Path, marker: Path) -> str:
    """A git repository whose package npm prepares (`npm install` in the clone, then
    `prepare`) when it installs it: the prepare writes `marker`."""
    spec = git_repository(where, "left-pad")
    (where / "package.json").write_text(json.dumps({
        "name": "left-pad", "version": "1.0.0",
        "scripts": {"prepare": f"node -e \"require('fs').writeFileSync('{marker}', 'ran')\""}}),
        encoding="utf-8")
    for argv in (["add", "."], ["-c", "user.name=thief", "-c", "user.email=t@example.com",
                                "commit", "-q", "-m", "prepare"]):
        subprocess.run(["git", *argv], cwd=where, check=True, capture_output=True)
    return spec


@pytest.mark.parametrize("kind", ["git", "url"])
def test_a_young_release_installing_code_from_outside_any_registry_is_refused(
    kind: str, public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    if kind == "git":
        spec = prepared(tmp_path / "repository", marker)
    else:
        public_registry.add(payload("payload-kit", marker))
        spec = public_registry.tarball_url("payload-kit", "1.0.0")
    public_registry.add(young("outside-host", dependencies={"left-pad": spec}),
                        young("registry-host", dependencies={"left-pad": "^1.3.0"}),
                        make_package("left-pad", ["1.3.0"]))

    # npm, straight from the public registry with scripts on, runs the dependency's code
    straight_from_public(npm_client, public_registry, "outside-host", scripts=True)
    assert marker.read_text(encoding="utf-8") == "ran"
    marker.unlink()

    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)
    reason = refused_with(npm_client, proxy, "outside-host", "young-package-capability")
    fetched = "a git repository" if kind == "git" else "a URL"
    assert f"`left-pad` ({spec}) is fetched from {fetched}, whose code npm runs" in reason
    # the same young release over a registry dependency: admitted, nothing of it runs
    admitted = install(npm_client, proxy, {"registry-host": "^1.0.0"})
    assert admitted.returncode == 0, admitted.stderr
    assert npm_client.installed()["registry-host"] == "1.0.0"
    assert not marker.exists()
