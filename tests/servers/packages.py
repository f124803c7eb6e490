"""Fixture npm packages: real tarballs, their `dist` digests, and the packuments a registry serves.

The suites need packages a real npm client accepts, and special cases the admission rules care
about, without any network. Decisions:

- Tarballs are real gzip'd tar files holding `package/package.json` and a file or two, built
  deterministically (sorted entries, fixed mtimes and owners, gzip mtime 0), so the same version
  always has the same bytes and the same digests, run after run.
- A `FixtureVersion` builds its tarball lazily and once; a packument of thousands of versions is
  cheap to create and pays for tarballs only when rendered.
- `dist.tarball` is not stored: a packument is rendered for a registry's base URL, so the same
  package can be served by the fixture registry, published to Verdaccio, or read by a test.
- Times are fixed (2020-01-01 plus a day per version) unless a builder says otherwise, so
  minimum-release-age rules see old versions by default and a `fresh_version` stands out; yarn
  4's default age gate (versions older than a day only) accepts every non-fresh fixture.
- Tarballs have realistic sizes by default: each version carries a deterministic,
  incompressible payload, so its tarball is 1 KB to 140 KB by a spread like the registry's
  (`realistic_size`); `size=` asks for another (several MB), `size=0` for a sub-kilobyte one.
  Registries content-code anything over 1 KB, which sub-kilobyte fixtures never show.
- Version order is plain semver (prereleases below their release); fixture versions are
  well-formed, so a small key function does it without a semver library.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, Literal

import orjson

from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from tests.sri import sri

__all__ = [
    "EPOCH",
    "DigestMode",
    "FixturePackage",
    "FixtureTree",
    "FixtureVersion",
    "fresh_version",
    "install_script_version",
    "iso",
    "make_package",
    "make_version",
    "no_digest_version",
    "realistic_package",
    "realistic_size",
    "semver_key",
    "sha1_only_version",
    "standard_tree",
    "tarball_filename",
    "tarball_path",
]

EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
TAR_MTIME = 499162500  # 1985-10-26T08:15:00Z, the fixed mtime npm itself writes into tarballs
MAINTAINERS = ({"name": "fixture", "email": "fixture@example.com"},)

DigestMode = Literal["sha512", "sha1", "none"]
"""What `dist` advertises: an sha512 `integrity` plus `shasum` (the normal case), only the
legacy sha1 `shasum`, or no digest at all."""

ABBREVIATED_FIELDS = (
    "name", "version", "deprecated", "dependencies", "optionalDependencies",
    "devDependencies", "bundleDependencies", "peerDependencies", "peerDependenciesMeta",
    "acceptDependencies", "bin", "directories", "dist", "engines", "os", "cpu", "libc",
    "_hasShrinkwrap", "hasInstallScript", "funding",
)
"""The fields npm's abbreviated ("corgi") version documents keep: what an install needs."""

_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def iso(moment: datetime) -> str:
    """A time as the npm registry writes it: UTC, milliseconds, a `Z`."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def semver_key(version: str) -> tuple[Any, ...]:
    """Sort key for a well-formed semver string: a prerelease sorts below its release."""
    match = _SEMVER.match(version)
    if match is None:
        raise ValueError(f"not a semver version: {version!r}")
    major, minor, patch, pre = match.groups()
    core = (int(major), int(minor), int(patch))
    if pre is None:
        return (*core, 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (*core, 0, parts)


def is_prerelease(version: str) -> bool:
    return bool(semver_key(version)[3] == 0)


def tarball_filename(name: str, version: str) -> str:
    """`name-1.0.0.tgz`; a scoped package's file drops the scope (`@s/n` -> `n-1.0.0.tgz`)."""
    return f"{name.rsplit('/', 1)[-1]}-{version}.tgz"


def tarball_path(name: str, version: str) -> str:
    """The path a registry serves a tarball at, unencoded: `/@s/n/-/n-1.0.0.tgz`."""
    return f"/{name}/-/{tarball_filename(name, version)}"


def build_tarball(files: Mapping[str, bytes], fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    """`files` packed as npm packs them (`fmt`: pax for a real package's paths of any length)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"package/{path}")
            info.size = len(data)
            info.mtime = TAR_MTIME
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def tar(entries: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    """An uncompressed tar of `entries` exactly as given (paths, types, format): the hostile
    layouts `build_tarball` never writes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for info, data in entries:
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def entry(path: str, data: bytes, kind: bytes = tarfile.REGTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(path)
    info.type = kind
    return info, data


def _tar_contents(tarball: bytes) -> tuple[int, int] | None:
    """(fileCount, unpackedSize) of a tarball, or None when the bytes are not one."""
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
    except (tarfile.TarError, OSError, EOFError):
        return None
    return len(members), sum(m.size for m in members)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _json_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


@dataclass
class FixtureVersion:
    """One published version: its manifest (package.json fields, no `dist`), when it was
    published, which digests its `dist` advertises, and its tarball (built lazily).

    `files` are the tarball's files besides `package.json` (paths under `package/`);
    `tarball` replaces the built bytes entirely (e.g. bytes that are not a tarball);
    `dist` entries override the computed `dist` fields (e.g. a wrong `integrity`).
    """

    manifest: dict[str, Any]
    published: datetime = EPOCH
    digests: DigestMode = "sha512"
    files: Mapping[str, bytes] = field(default_factory=dict)
    dist_overrides: Mapping[str, Any] = field(default_factory=dict)
    explicit_tarball: bytes | None = None
    mirrored: bool = False

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    @property
    def filename(self) -> str:
        return tarball_filename(self.name, self.version)

    @cached_property
    def tarball(self) -> bytes:
        if self.explicit_tarball is not None:
            return self.explicit_tarball
        contents = {"package.json": _json_bytes(self.manifest), **self.files}
        return build_tarball(contents)

    @cached_property
    def integrity(self) -> str:
        """The sha512 SRI of the tarball (whether or not `dist` advertises it)."""
        return sri("sha512", self.tarball)

    @cached_property
    def shasum(self) -> str:
        """The hex sha1 of the tarball (whether or not `dist` advertises it)."""
        return hashlib.sha1(self.tarball, usedforsecurity=False).hexdigest()

    @cached_property
    def _contents(self) -> tuple[int, int] | None:
        if self.explicit_tarball is None:
            sizes = [len(_json_bytes(self.manifest)), *(len(d) for d in self.files.values())]
            return len(sizes), sum(sizes)
        return _tar_contents(self.explicit_tarball)

    def dist(self, tarball_url: str) -> dict[str, Any]:
        dist: dict[str, Any] = {"tarball": tarball_url}
        if self.digests == "sha512":
            dist["integrity"] = self.integrity
        if self.digests in ("sha512", "sha1"):
            dist["shasum"] = self.shasum
        # both given: the tarball is not walked (a hostile one costs Python's tarfile seconds)
        if not {"fileCount", "unpackedSize"} <= self.dist_overrides.keys() \
                and self._contents is not None:
            dist["fileCount"], dist["unpackedSize"] = self._contents
        dist.update(self.dist_overrides)
        return dist

    def document(self, base_url: str) -> dict[str, Any]:
        """The version document inside a full packument (manifest, `_id`, `dist`...)."""
        doc = dict(self.manifest)
        doc["_id"] = f"{self.name}@{self.version}"
        doc.setdefault("maintainers", [dict(m) for m in MAINTAINERS])
        doc.setdefault("_npmUser", dict(MAINTAINERS[0]))
        doc["dist"] = self.dist(base_url.rstrip("/") + tarball_path(self.name, self.version))
        if self.mirrored:  # the worker marks the integrity it publishes in `dist`
            mark = doc["dist"].get("integrity", self.integrity)
            return with_mark(doc, MirrorMark(iso(self.published), mark))
        return doc

    def marked(self) -> FixtureVersion:
        """This version as the worker mirrors it: its document carries the mirror mark (the
        public publish time, the verified integrity). Publish it to the private registry."""
        return replace(self, mirrored=True, explicit_tarball=self.tarball)

    def with_dist(self, **overrides: Any) -> FixtureVersion:
        """A copy whose `dist` says something else (same tarball bytes), e.g.
        `version.with_dist(integrity="sha512-...")` to model a packument changed upstream."""
        return replace(self, dist_overrides={**self.dist_overrides, **overrides},
                       explicit_tarball=self.tarball)


@dataclass
class FixturePackage:
    """A package: its versions, dist-tags and package-level fields, rendered as a packument."""

    name: str
    versions: dict[str, FixtureVersion]
    dist_tags: dict[str, str]
    readme: str = ""
    fields: dict[str, Any] = field(default_factory=dict)

    def sorted_versions(self) -> list[str]:
        return sorted(self.versions, key=semver_key)

    def version(self, version: str) -> FixtureVersion:
        return self.versions[version]

    @property
    def latest(self) -> FixtureVersion:
        return self.versions[self.dist_tags["latest"]]

    def by_filename(self, filename: str) -> FixtureVersion | None:
        for candidate in self.versions.values():
            if candidate.filename == filename:
                return candidate
        return None

    def tarball_url(self, base_url: str, version: str) -> str:
        return base_url.rstrip("/") + tarball_path(self.name, version)

    def with_version(self, version: FixtureVersion) -> FixturePackage:
        """A copy with `version` added (or replacing the one with the same number); a new
        version moves `latest`/`next` as `default_dist_tags` would, other tags are kept."""
        versions = {**self.versions, version.version: version}
        tags = dict(self.dist_tags)
        if version.version not in self.versions:
            tags.update(default_dist_tags(versions))
        return FixturePackage(self.name, versions, tags, self.readme, dict(self.fields))

    def packument(self, base_url: str) -> dict[str, Any]:
        """The full document (`GET /<name>` with `Accept: application/json`). Nested values
        are shared with the manifests: `copy.deepcopy` it before editing it."""
        order = self.sorted_versions()
        published = [self.versions[v].published for v in order]
        time: dict[str, str] = {
            "created": iso(min(published)) if published else iso(EPOCH),
            "modified": iso(max(published)) if published else iso(EPOCH),
        }
        time.update((v, iso(self.versions[v].published)) for v in order)
        latest = self.versions.get(self.dist_tags.get("latest", ""))
        doc: dict[str, Any] = {
            "_id": self.name,
            "_rev": f"{len(order)}-{_md5(self.name)}",
            "name": self.name,
            "description": (latest.manifest.get("description", "") if latest else ""),
            "dist-tags": dict(self.dist_tags),
            "versions": {v: self.versions[v].document(base_url) for v in order},
            "time": time,
            "maintainers": [dict(m) for m in MAINTAINERS],
            "license": latest.manifest.get("license", "MIT") if latest else "MIT",
            "readme": self.readme,
            "readmeFilename": "README.md" if self.readme else "",
        }
        doc.update(self.fields)
        return doc

    def abbreviated(self, base_url: str) -> dict[str, Any]:
        """The install document (`Accept: application/vnd.npm.install-v1+json`)."""
        full = self.packument(base_url)
        return {
            "name": self.name,
            "modified": full["time"]["modified"],
            "dist-tags": full["dist-tags"],
            "versions": {
                v: {k: doc[k] for k in ABBREVIATED_FIELDS if k in doc}
                for v, doc in full["versions"].items()
            },
        }


@dataclass
class FixtureTree:
    """A set of packages that depend on each other, and what a project should ask for."""

    packages: list[FixturePackage]
    dependencies: dict[str, str]
    """The root `dependencies` of a test project's package.json."""
    resolved: dict[str, str]
    """What npm should install for those dependencies: name -> version."""


def default_dist_tags(versions: Mapping[str, FixtureVersion]) -> dict[str, str]:
    """`latest` is the highest release (the highest prerelease when there is no release);
    `next` is the highest prerelease when it is above `latest`."""
    order = sorted(versions, key=semver_key)
    if not order:
        return {}
    stable = [v for v in order if not is_prerelease(v)]
    tags = {"latest": stable[-1] if stable else order[-1]}
    if is_prerelease(order[-1]) and order[-1] != tags["latest"]:
        tags["next"] = order[-1]
    return tags


SIZES = (1_500, 2_000, 3_500, 6_000, 9_000, 14_000, 22_000, 40_000, 75_000, 140_000)
"""Tarball sizes `realistic_size` spreads versions over: most a few KB, some over 100 KB."""
TAR_OVERHEAD = 420
"""About what the tar headers, package.json and the small files add to the payload, gzip'd."""


def realistic_size(name: str, version: str) -> int:
    """The tarball size a version gets by default: one of SIZES, the same on every run."""
    digest = hashlib.sha256(f"{name}@{version}".encode()).digest()
    return SIZES[digest[0] % len(SIZES)]


def _payload(name: str, version: str, size: int) -> bytes:
    """`size` incompressible bytes, the same for the same version on every run."""
    return hashlib.shake_256(f"payload {name}@{version}".encode()).digest(size)


def _default_files(name: str, version: str, size: int | None = 0) -> dict[str, bytes]:
    files = {
        "index.js": f"module.exports = {{ name: {name!r}, version: {version!r} }};\n".encode(),
        "README.md": f"# {name}\n\nA fixture package, version {version}.\n".encode(),
    }
    wanted = realistic_size(name, version) if size is None else size
    if wanted > TAR_OVERHEAD:
        files["lib/payload.bin"] = _payload(name, version, wanted - TAR_OVERHEAD)
    return files


def make_version(
    name: str,
    version: str,
    dependencies: Mapping[str, str] | None = None,
    *,
    published: datetime = EPOCH,
    digests: DigestMode = "sha512",
    install_script: bool = False,
    files: Mapping[str, bytes] | None = None,
    size: int | None = None,
    tarball: bytes | None = None,
    dist: Mapping[str, Any] | None = None,
    **manifest: Any,
) -> FixtureVersion:
    """A version with a real tarball of about `size` bytes (default: `realistic_size`; 0: as
    small as it gets; ignored when `files` are given); keyword arguments not named here are
    manifest fields (`description`, `license`, `bin`, `engines`, `scripts`...)."""
    semver_key(version)
    fields: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": f"{name}, a fixture package",
        "main": "index.js",
        "license": "MIT",
        "dependencies": dict(dependencies or {}),
    }
    if install_script:
        fields["scripts"] = {"postinstall": "node -e \"console.log('postinstall ran')\""}
        fields["hasInstallScript"] = True
    fields.update(manifest)
    return FixtureVersion(
        manifest=fields,
        published=published,
        digests=digests,
        files=dict(_default_files(name, version, size) if files is None else files),
        dist_overrides=dict(dist or {}),
        explicit_tarball=tarball,
    )


def no_digest_version(name: str, version: str, **overrides: Any) -> FixtureVersion:
    """A version whose `dist` has neither `integrity` nor `shasum`."""
    return make_version(name, version, digests="none", **overrides)


def sha1_only_version(name: str, version: str, **overrides: Any) -> FixtureVersion:
    """A version whose `dist` has only the legacy sha1 `shasum`."""
    return make_version(name, version, digests="sha1", **overrides)


def install_script_version(name: str, version: str, **overrides: Any) -> FixtureVersion:
    """A version with a `postinstall` script (and `hasInstallScript: true`)."""
    return make_version(name, version, install_script=True, **overrides)


def fresh_version(name: str, version: str, age: timedelta = timedelta(minutes=5),
                  **overrides: Any) -> FixtureVersion:
    """A version published `age` ago (minutes, by default): what a release-age rule holds."""
    return make_version(name, version, published=datetime.now(UTC) - age, **overrides)


def make_package(
    name: str,
    versions: Iterable[str | FixtureVersion] = ("1.0.0",),
    dependencies: Mapping[str, str] | None = None,
    *,
    dist_tags: Mapping[str, str] | None = None,
    readme: str | None = None,
    **overrides: Any,
) -> FixturePackage:
    """A package of `versions`: strings are built with `make_version(name, v, dependencies,
    **overrides)` and published a day apart from 2020-01-01; `FixtureVersion`s are kept as given.
    `dist_tags` defaults to `latest` = highest release (and `next` for a higher prerelease)."""
    built: dict[str, FixtureVersion] = {}
    for index, spec in enumerate(versions):
        if isinstance(spec, FixtureVersion):
            if spec.name != name:
                raise ValueError(f"version {spec.version} belongs to {spec.name}, not {name}")
            built[spec.version] = spec
            continue
        options = {"published": EPOCH + timedelta(days=index), **overrides}
        built[spec] = make_version(name, spec, dependencies, **options)
    return FixturePackage(
        name=name,
        versions=built,
        dist_tags=dict(dist_tags) if dist_tags is not None else default_dist_tags(built),
        readme=readme if readme is not None else f"# {name}\n\nA fixture package.\n",
    )


def _people(count: int, role: str) -> list[dict[str, str]]:
    return [{"name": f"{role} {i}", "email": f"{role}{i}@example.com",
             "url": f"https://example.com/~{role}{i}"} for i in range(count)]


def realistic_package(
    name: str,
    versions: int = 300,
    *,
    manifest_size: int = 2_300,
    readme_size: int = 40_000,
) -> FixturePackage:
    """A packument shaped and sized like a popular package's: `versions` releases (1.0.0,
    1.0.1... ten patches per minor, ten minors per major), each manifest about
    `manifest_size` bytes of JSON (dependencies, devDependencies, contributors, scripts...),
    a readme, `time` for every version, the first ten deprecated, sub-kilobyte tarballs (built
    only when read; a rendered packument hashes them all). The defaults give about 750 KB,
    like express;
    `realistic_package(name, versions=3_500, manifest_size=2_800)` gives about 10 MB.

    Generation is cheap: the bulky fields are built once and shared by every version, and
    each version's (small, real) tarball is built only when something reads it.
    """
    dependencies = {f"dep-{i:02d}": f"~{i % 7}.{i % 5}.{i % 3}" for i in range(24)}
    dev_dependencies = {f"devdep-{i:02d}": f"^{i % 4}.{i % 9}.0" for i in range(16)}
    base: dict[str, Any] = {
        "description": f"{name}: a fast, unopinionated fixture package for benchmarks",
        "license": "MIT",
        "author": {"name": "Fixture Author", "email": "author@example.com"},
        "homepage": f"https://example.com/{name}",
        "repository": {"type": "git", "url": f"git+https://example.com/{name}.git"},
        "bugs": {"url": f"https://example.com/{name}/issues"},
        "keywords": ["framework", "web", "http", "rest", "router", "app", "api", "fixture"],
        "engines": {"node": ">= 0.10.0"},
        "scripts": {"test": "mocha --require test/support/env --reporter spec --bail",
                    "lint": "eslint .", "test-ci": "nyc --reporter=lcovonly npm test"},
        "dependencies": dependencies,
        "devDependencies": dev_dependencies,
        "directories": {},
        "_hasShrinkwrap": False,
        "_nodeVersion": "18.17.1",
        "_npmVersion": "9.6.7",
        "gitHead": "0" * 40,
    }
    probe = len(orjson.dumps({**base, "name": name, "version": "1.0.0"}))
    contributors = max(0, (manifest_size - probe - 250) // 95)
    base["contributors"] = _people(contributors, "contributor")
    built: dict[str, FixtureVersion] = {}
    for index in range(versions):
        version = f"{index // 100 + 1}.{index // 10 % 10}.{index % 10}"
        manifest = {"name": name, "version": version, **base}
        if index < 10:  # the first minor is deprecated, as long-lived packages' often are
            manifest["deprecated"] = f"{name} 1.0.x has a known bug; upgrade to 1.1 or later"
        built[version] = FixtureVersion(
            manifest=manifest,
            published=EPOCH + timedelta(hours=12 * index),
            # small tarballs: a packument's `dist` hashes every one of its thousands
            files=_default_files(name, version, 0),
        )
    paragraph = ("This fixture readme stands in for a long one: installation, examples, "
                 "options, and a changelog nobody reads. ")
    readme = f"# {name}\n\n" + paragraph * max(1, readme_size // len(paragraph))
    return FixturePackage(name, built, default_dist_tags(built), readme,
                          {"keywords": base["keywords"], "homepage": base["homepage"],
                           "repository": base["repository"], "bugs": base["bugs"],
                           "users": {f"user{i}": True for i in range(50)}})


def standard_tree() -> FixtureTree:
    """Six packages for `npm install` tests, one scoped, with real ranges between them:

        app -> alpha@^1.0.0          (1.0.0, 1.2.0, 2.0.0: resolves to 1.2.0, not latest)
            -> @fixture/beta@~2.1.0  (2.0.0, 2.1.0, 2.1.3, 2.2.0: resolves to 2.1.3)
        alpha 1.2.0 -> gamma@^3.0.0  (3.0.0, 3.1.0, 3.2.0-rc.1: the prerelease is skipped)
                    -> delta@~0.4.0  (0.4.0, 0.4.2, 0.5.0: resolves to 0.4.2)
        @fixture/beta 2.1.3 -> delta@^0.4.1, epsilon@^1.0.0
        gamma 3.1.0 -> epsilon@^1.1.0 (1.0.0, 1.1.0, 1.2.0: resolves to 1.2.0)
        epsilon 1.2.0 -> zeta@1.x     (1.0.0, 1.0.1: resolves to 1.0.1)
    """
    packages = [
        make_package("alpha", [
            make_version("alpha", "1.0.0", {"gamma": "^3.0.0"}, published=EPOCH),
            make_version("alpha", "1.2.0", {"gamma": "^3.0.0", "delta": "~0.4.0"},
                         published=EPOCH + timedelta(days=10)),
            make_version("alpha", "2.0.0", {"gamma": "^3.1.0"},
                         published=EPOCH + timedelta(days=20)),
        ]),
        make_package("@fixture/beta", ["2.0.0", "2.1.0", "2.1.3", "2.2.0"],
                     {"delta": "^0.4.1", "epsilon": "^1.0.0"}),
        make_package("gamma", ["3.0.0", "3.1.0", "3.2.0-rc.1"], {"epsilon": "^1.1.0"}),
        make_package("delta", ["0.4.0", "0.4.2", "0.5.0"]),
        make_package("epsilon", ["1.0.0", "1.1.0", "1.2.0"], {"zeta": "1.x"}),
        make_package("zeta", ["1.0.0", "1.0.1"]),
    ]
    return FixtureTree(
        packages=packages,
        dependencies={"alpha": "^1.0.0", "@fixture/beta": "~2.1.0"},
        resolved={"alpha": "1.2.0", "@fixture/beta": "2.1.3", "gamma": "3.1.0",
                  "delta": "0.4.2", "epsilon": "1.2.0", "zeta": "1.0.1"},
    )


def wide_tree(count: int, *, prefix: str = "wide") -> FixtureTree:
    """`count` packages a project depends on directly, each with three versions and a
    dependency on the next one (`wide-000` -> `wide-001` ...), tarballs of realistic sizes
    (`realistic_size`): a lockfile like a small service's (106 packages: a typical one)."""
    names = [f"{prefix}-{index:03d}" for index in range(count)]
    packages = [
        make_package(name, ["1.0.0", "1.1.0", "1.2.0"],
                     {names[index + 1]: "^1.0.0"} if index + 1 < count else None)
        for index, name in enumerate(names)]
    return FixtureTree(packages=packages, dependencies={name: "^1.0.0" for name in names},
                       resolved=dict.fromkeys(names, "1.2.0"))
