"""A dependency tree the size of a real project's, built once on disk, and the registry serving it.

`bench.cold_scale` installs it through mirrorgate. Decisions:

- Sizes follow a real tree's: most packages have a few dozen versions and packuments of tens of
  KB, some hundreds of versions, and a handful thousands (mostly prereleases, as a compiler's
  nightlies are) with full packuments of 10 to 30 MB. Installed tarballs are 1 KB to 5 MB,
  mostly small; a few MB for the huge packages' installed version.
- Every package depends only on packages after it (a DAG, every name reachable from the root);
  ranges are `^M.0.0`, and about one name in nine is also wanted at an older major, so npm
  nests a second version of it, as real lockfiles do.
- Only the versions the tree installs get real tarballs; every other version's `dist` carries
  digests of the right form over other bytes, since nothing ever downloads it (the registry
  answers 404 for its tarball). Packuments are what the gate reads; their bytes are real-sized.
- Built once per (names, seed) into a cache directory, since generating it takes a minute and
  npm's resolution of it (the lockfile) another: `ScaleTree.build` reuses what is there.
- `ScaleRegistry` is the fixture registry answering from that directory: packuments gzip'd
  (compressed once at start, with the registry's own base URL in them), tarballs as stored
  (identity, as public registries send them), and counts of the requests and body bytes it
  served, by kind, for "what did the public upstream send".
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import random
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from tests.servers.fixture_registry import FixtureRegistry, Manners, _Answer, _error, _etag
from tests.servers.npm import NpmClient
from tests.servers.packages import build_tarball, iso, tarball_filename

__all__ = ["Counters", "ScaleRegistry", "ScaleTree"]

GENERATOR = 2
"""Bumped whenever the generator changes what it builds, so an old cache is not reused."""
BASE = "http://scale-registry.invalid"
"""Stands for the registry's base URL in the packuments on disk."""
START = datetime(2014, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=365 * 9)
"""Versions are published over nine years ending well before now (every cooldown passed)."""
ROOT_DEPENDENCIES = 60
HUGE = ((4_200, 5_400), (3_400, 4_300), (2_600, 3_800), (2_200, 4_600), (2_000, 4_400),
        (1_800, 3_600))
"""(versions, manifest bytes) of the few huge packuments: a compiler's nightlies, a types
package, an SDK. Full packuments of about 10 to 25 MB."""
MAX_PACKUMENT = 30_000_000
"""Below mirrorgate's default MIRRORGATE_MAX_METADATA_BYTES (32 MiB)."""


@dataclass(frozen=True)
class Shape:
    versions: int
    manifest_bytes: int
    readme_bytes: int
    prerelease_share: float


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _shape(rng: random.Random, index: int, count: int) -> Shape:
    """The size of package `index`: the huge ones are spread over the tree, not all at its
    root, so they are filled among the others."""
    spread = max(1, count // (len(HUGE) + 1))
    if index % spread == spread // 2 and index // spread < len(HUGE):
        versions, manifest = HUGE[index // spread]
        return Shape(versions, manifest, 30_000, 0.7)
    draw = rng.random()
    if draw < 0.55:
        return Shape(rng.randint(1, 25), rng.randint(700, 1_500), rng.randint(500, 6_000), 0.0)
    if draw < 0.83:
        return Shape(rng.randint(25, 100), rng.randint(1_000, 2_500),
                     rng.randint(2_000, 15_000), 0.05)
    if draw < 0.965:
        return Shape(rng.randint(100, 400), rng.randint(1_500, 3_000),
                     rng.randint(4_000, 30_000), 0.15)
    return Shape(rng.randint(400, 1_500), rng.randint(2_000, 4_000),
                 rng.randint(8_000, 40_000), 0.3)


def _tarball_size(rng: random.Random) -> int:
    draw = rng.random()
    if draw < 0.58:
        return int(_log_uniform(rng, 1_000, 10_000))
    if draw < 0.88:
        return int(_log_uniform(rng, 10_000, 100_000))
    if draw < 0.99:
        return int(_log_uniform(rng, 100_000, 1_000_000))
    return int(_log_uniform(rng, 1_000_000, 5_000_000))


def _versions(rng: random.Random, shape: Shape) -> list[str]:
    """`shape.versions` versions in publish order: patches, minors, a few majors, from 1.0.0;
    a share of them prereleases of the next patch."""
    stable_wanted = max(1, round(shape.versions * (1 - shape.prerelease_share)))
    major_every = max(12.0, stable_wanted / 6)
    major, minor, patch = 1, 0, 0
    found: list[str] = []
    stable = 0
    while len(found) < shape.versions:
        if stable and len(found) < shape.versions - 1 and rng.random() < shape.prerelease_share:
            found.append(f"{major}.{minor}.{patch + 1}-dev.{len(found)}")
            continue
        if stable:
            draw = rng.random()
            if draw < 1 / major_every:
                major, minor, patch = major + 1, 0, 0
            elif draw < 0.3:
                minor, patch = minor + 1, 0
            else:
                patch += 1
        found.append(f"{major}.{minor}.{patch}")
        stable += 1
    return found


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def _stable(version: str) -> bool:
    return "-" not in version


def _highest_of_major(versions: list[str], major: int) -> str:
    # published in order, so the last stable version of a major is its highest
    return [v for v in versions if _stable(v) and _major(v) == major][-1]


def _name(index: int) -> str:
    if index % 4 == 1:  # a quarter scoped, as @babel/..., @types/... are
        return f"@scale-s{index % 37:02d}/pkg-{index:04d}"
    return f"scale-pkg-{index:04d}"


@dataclass
class _Package:
    name: str
    shape: Shape
    versions: list[str]
    dependencies: dict[str, str] = field(default_factory=dict)
    installed: dict[str, int] = field(default_factory=dict)
    """Installed version -> its tarball's payload size."""

    @property
    def latest(self) -> str:
        return [v for v in self.versions if _stable(v)][-1]

    def majors(self) -> list[int]:
        return sorted({_major(v) for v in self.versions if _stable(v)})


def _plan(count: int, seed: int) -> tuple[list[_Package], dict[str, str]]:
    """The packages, their dependencies and installed versions, and the root's dependencies."""
    rng = random.Random(seed)
    packages = []
    for index in range(count):
        shape = _shape(rng, index, count)
        packages.append(_Package(_name(index), shape, _versions(rng, shape)))
    wanted_old = [len(p.majors()) > 1 and rng.random() < 0.15 for p in packages]

    def main_range(target: _Package) -> str:
        return f"^{_major(target.latest)}.0.0"

    def old_range(target: _Package) -> str:
        return f"^{target.majors()[-2]}.0.0"

    roots = min(ROOT_DEPENDENCIES, count)
    for child in range(roots, count):  # a tree first: every name reachable from the root
        parent = rng.randrange(0, child)
        packages[parent].dependencies[packages[child].name] = main_range(packages[child])
    for index, package in enumerate(packages):  # then the sharing real trees have
        draw = rng.random()
        extra = 0 if draw < 0.35 else rng.randint(1, 3) if draw < 0.8 else rng.randint(4, 12)
        later = range(index + 1, count)
        for target in rng.sample(later, min(extra, len(later))):
            name = packages[target].name
            if name in package.dependencies:
                continue
            old = wanted_old[target] and rng.random() < 0.5
            package.dependencies[name] = (old_range if old else main_range)(packages[target])
    wanted = {(name, spec) for p in packages for name, spec in p.dependencies.items()}
    for target, package in enumerate(packages):  # an older major wanted at least once
        if not wanted_old[target] or target < 1 or (package.name, old_range(package)) in wanted:
            continue
        parents = [p for p in packages[:target] if package.name not in p.dependencies]
        if parents:
            rng.choice(parents).dependencies[package.name] = old_range(package)
    for package in packages:
        huge = package.shape.prerelease_share >= 0.7  # one of HUGE
        package.installed[package.latest] = (int(_log_uniform(rng, 2_000_000, 5_000_000))
                                             if huge else _tarball_size(rng))
    by_name = {p.name: p for p in packages}
    for package in packages:
        for name, spec in package.dependencies.items():
            needed = by_name[name]
            version = _highest_of_major(needed.versions, int(spec[1:].split(".", 1)[0]))
            if version not in needed.installed:
                needed.installed[version] = _tarball_size(rng)
    root = {packages[i].name: main_range(packages[i]) for i in range(roots)}
    return packages, root


def _fake_digests(name: str, version: str) -> tuple[str, str]:
    seed = f"not downloaded: {name}@{version}".encode()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(seed).digest()).decode()
    return integrity, hashlib.sha1(seed, usedforsecurity=False).hexdigest()


def _dev_dependencies(count: int) -> dict[str, str]:
    return {f"@scale-dev/tool-{i:03d}": f"^{i % 9}.{i % 13}.{i % 5}" for i in range(count)}


def _contributors(count: int) -> list[dict[str, str]]:
    return [{"name": f"Contributor {i}", "email": f"contributor{i}@example.com",
             "url": f"https://example.com/~contributor{i}"} for i in range(count)]


def _tarball(name: str, version: str, dependencies: dict[str, str], payload: int) -> bytes:
    manifest = {"name": name, "version": version, "main": "index.js", "license": "MIT",
                "dependencies": dependencies}
    body = hashlib.shake_256(f"payload {name}@{version}".encode()).digest(max(0, payload - 400))
    return build_tarball({
        "package.json": json.dumps(manifest, indent=2).encode() + b"\n",
        "index.js": f"module.exports = {json.dumps(name + '@' + version)};\n".encode(),
        "lib/payload.bin": body,
    })


def _document(package: _Package, tarballs: dict[str, bytes]) -> bytes:
    """The full packument, its tarball URLs on BASE."""
    name = package.name
    bare = name.rsplit("/", 1)[-1]
    common: dict[str, Any] = {
        "description": f"{name}: a package of a realistic size for the scale bench",
        "main": "index.js",
        "license": "MIT",
        "author": {"name": "Scale Author", "email": "author@example.com"},
        "homepage": f"https://example.com/{bare}#readme",
        "repository": {"type": "git", "url": f"git+https://example.com/{bare}.git"},
        "bugs": {"url": f"https://example.com/{bare}/issues"},
        "keywords": ["scale", "bench", "fixture", bare],
        "engines": {"node": ">=14"},
        "scripts": {"test": "node test/run.js", "build": "tsc -p tsconfig.json"},
        "dependencies": package.dependencies,
        "_npmUser": {"name": "scale-publisher", "email": "publisher@example.com"},
        "maintainers": [{"name": "scale-publisher", "email": "publisher@example.com"}],
        "directories": {},
        "_nodeVersion": "20.11.1",
        "_npmVersion": "10.2.4",
        "_hasShrinkwrap": False,
    }
    # the rest of the size: a fifth in devDependencies, which the abbreviated form keeps, the
    # rest in contributors, which it drops; abbreviated versions come out at about 40% of full
    probe = len(orjson.dumps(common)) + 520  # `dist`, `_id`, `gitHead`... come on top
    spare = max(0, package.shape.manifest_bytes - probe)
    common["devDependencies"] = _dev_dependencies(spare // 5 // 34)
    common["contributors"] = _contributors(spare * 4 // 5 // 95)
    versions: dict[str, Any] = {}
    times: dict[str, str] = {}
    count = len(package.versions)
    for order, version in enumerate(package.versions):
        filename = tarball_filename(name, version)
        tarball = tarballs.get(version)
        if tarball is not None:
            integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
            shasum = hashlib.sha1(tarball, usedforsecurity=False).hexdigest()
            unpacked = package.installed[version]
        else:
            integrity, shasum = _fake_digests(name, version)
            unpacked = 1_000 + (order * 7919) % 90_000
        signature = base64.b64encode(hashlib.sha256(integrity.encode()).digest() * 2).decode()
        versions[version] = {
            "name": name, "version": version, **common,
            "gitHead": hashlib.sha1(f"{name}{version}".encode(),
                                    usedforsecurity=False).hexdigest(),
            "_id": f"{name}@{version}",
            "dist": {"integrity": integrity, "shasum": shasum,
                     "tarball": f"{BASE}/{name}/-/{filename}", "fileCount": 3 + order % 40,
                     "unpackedSize": unpacked,
                     "signatures": [{"keyid": "SHA256:scale-bench-key", "sig": signature}]},
            "_npmOperationalInternal": {"host": "s3://scale-bench",
                                        "tmp": f"tmp/{bare}_{version}_{order}"},
        }
        times[version] = iso(START + SPAN * (order + 1) / (count + 1))
    paragraph = "A readme of a realistic length: usage, options, examples and a changelog. "
    document = {
        "_id": name,
        "_rev": f"{count}-{hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()}",
        "name": name,
        "description": common["description"],
        "dist-tags": {"latest": package.latest},
        "versions": versions,
        "time": {"created": iso(START), "modified": times[package.versions[-1]], **times},
        "maintainers": common["maintainers"],
        "author": common["author"],
        "repository": common["repository"],
        "homepage": common["homepage"],
        "bugs": common["bugs"],
        "keywords": common["keywords"],
        "license": "MIT",
        "readme": f"# {name}\n\n" + paragraph * max(1, package.shape.readme_bytes
                                                    // len(paragraph)),
        "readmeFilename": "README.md",
    }
    return orjson.dumps(document)


def _path_of(name: str) -> str:
    """A file name for a package name (`@s/n` -> `@s+n`)."""
    return name.replace("/", "+")


@dataclass(frozen=True)
class ScaleTree:
    """A built tree on disk: `packuments/<name>.json`, `tarballs/<name>/<file>.tgz`,
    `tree.json` (the root's dependencies, every name's installed versions, the sizes)."""

    root: Path
    dependencies: dict[str, str]
    installed: dict[str, list[str]]
    stats: dict[str, Any]

    @property
    def versions_installed(self) -> int:
        return sum(len(versions) for versions in self.installed.values())

    @property
    def lockfile(self) -> Path:
        return self.root / "package-lock.json"

    def packument_path(self, name: str) -> Path:
        return self.root / "packuments" / f"{_path_of(name)}.json"

    def tarball_path(self, name: str, filename: str) -> Path:
        return self.root / "tarballs" / _path_of(name) / filename

    def names(self) -> Iterator[str]:
        return iter(self.installed)

    @classmethod
    def build(cls, cache: Path, count: int, seed: int) -> ScaleTree:
        """The tree for (`count` names, `seed`) under `cache`, generated unless it is there."""
        root = cache / f"scale-g{GENERATOR}-n{count}-s{seed}"
        index = root / "tree.json"
        if not index.is_file():
            temporary = root.with_name(root.name + ".partial")
            shutil.rmtree(temporary, ignore_errors=True)
            _generate(temporary, count, seed)
            shutil.rmtree(root, ignore_errors=True)
            temporary.rename(root)
        data = json.loads(index.read_text())
        return cls(root, data["dependencies"], data["installed"], data["stats"])

    def ensure_lockfile(self, npm: NpmClient, registry: str) -> None:
        """The project's package.json and package-lock.json in `npm`'s project: the lockfile
        from the cache, or resolved by one `npm install` against `registry` and kept."""
        npm.write_project(self.dependencies, name="scale-app")
        target = npm.project / "package-lock.json"
        if not self.lockfile.is_file():
            done = npm.install(registry=registry, timeout=1_800)
            if done.returncode != 0:
                raise RuntimeError(f"the lockfile install failed:\n{done.stderr[-3000:]}")
            shutil.copyfile(target, self.lockfile)
            shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
        shutil.copyfile(self.lockfile, target)
        locked = json.loads(target.read_text())["packages"]
        found = {(path.rsplit("node_modules/", 1)[-1], entry["version"])
                 for path, entry in locked.items() if path}
        expected = {(name, version) for name, versions in self.installed.items()
                    for version in versions}
        if found != expected:
            raise RuntimeError(f"npm resolved another tree than the one built: "
                               f"{len(found - expected)} unexpected, {len(expected - found)} "
                               "missing versions")
        self.stats["lockfile_entries"] = len(locked) - 1


def _generate(root: Path, count: int, seed: int) -> None:
    packages, dependencies = _plan(count, seed)
    sizes: list[int] = []
    tarball_bytes = 0
    for package in packages:
        tarballs = {version: _tarball(package.name, version, package.dependencies, payload)
                    for version, payload in package.installed.items()}
        directory = root / "tarballs" / _path_of(package.name)
        directory.mkdir(parents=True, exist_ok=True)
        for version, tarball in tarballs.items():
            (directory / tarball_filename(package.name, version)).write_bytes(tarball)
            tarball_bytes += len(tarball)
        document = _document(package, tarballs)
        if len(document) > MAX_PACKUMENT:
            raise RuntimeError(f"{package.name}'s packument is {len(document)} bytes")
        path = root / "packuments" / f"{_path_of(package.name)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(document)
        sizes.append(len(document))
    ordered = sorted(sizes)
    installed = {p.name: sorted(p.installed) for p in packages}
    stats = {
        "names": len(packages),
        "versions_listed": sum(len(p.versions) for p in packages),
        "versions_installed": sum(len(v) for v in installed.values()),
        "packument_bytes": sum(sizes),
        "packument_median": ordered[len(ordered) // 2],
        "packument_p90": ordered[int(len(ordered) * 0.9)],
        "packument_max": ordered[-1],
        "packuments_over_1mb": sum(1 for s in sizes if s > 1_000_000),
        "tarball_bytes": tarball_bytes,
    }
    (root / "tree.json").write_text(json.dumps(
        {"dependencies": dependencies, "installed": installed, "stats": stats}, indent=1))


# --- the registry -----------------------------------------------------------------------------

@dataclass
class Counters:
    """What the registry answered: requests and body bytes (as sent) by kind."""

    requests: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, size: int) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + size

    def minus(self, other: Counters) -> Counters:
        kinds = set(self.requests) | set(other.requests)
        return Counters({k: self.requests.get(k, 0) - other.requests.get(k, 0) for k in kinds},
                        {k: self.bytes.get(k, 0) - other.bytes.get(k, 0) for k in kinds})


class ScaleRegistry(FixtureRegistry):
    """The fixture registry serving a `ScaleTree` from disk (see the module's head)."""

    def __init__(self, tree: ScaleTree) -> None:
        super().__init__(manners=Manners(gzip="never"))
        self.tree = tree
        self._count_lock = threading.Lock()
        self._counters = Counters()
        self._documents: dict[str, tuple[bytes, str]] = {}
        base = self.url.rstrip("/").encode()
        for name in tree.names():
            plain = tree.packument_path(name).read_bytes().replace(BASE.encode(), base)
            coded = gzip.compress(plain, compresslevel=6, mtime=0)
            self._documents[name] = (coded, _etag(plain))

    def counters(self) -> Counters:
        with self._count_lock:
            return Counters(dict(self._counters.requests), dict(self._counters.bytes))

    def _count(self, kind: str, answer: _Answer) -> _Answer:
        with self._count_lock:
            self._counters.add(kind, len(answer.body))
        return answer

    def _answer(self, request: web.Request, path: str) -> _Answer:
        if request.method not in ("GET", "HEAD"):
            return _error(405, f"{request.method} is not supported by the scale registry")
        rest = path.lstrip("/")
        if "/-/" in rest:
            name, filename = rest.split("/-/", 1)
            return self._count("tarball", self._scale_tarball(name, filename))
        found = self._documents.get(rest)
        if found is None:
            return self._count("other", _error(404, "Not found"))
        coded, etag = found
        headers = {"Content-Type": "application/json", "ETag": etag, "Vary": "Accept-Encoding"}
        if etag in request.headers.get("If-None-Match", ""):
            return self._count("packument-304", _Answer(304, headers, b""))
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return self._count("packument", _Answer(200, {**headers, "Content-Encoding": "gzip"},
                                                    coded))
        return self._count("packument", _Answer(200, headers, gzip.decompress(coded)))

    def _scale_tarball(self, name: str, filename: str) -> _Answer:
        if "/" in filename or filename.startswith(".") or name not in self._documents:
            return _error(404, "Not found")
        try:
            body = self.tree.tarball_path(name, filename).read_bytes()
        except OSError:
            return _error(404, "Not found")
        return _Answer(200, {"Content-Type": "application/octet-stream"}, body)
