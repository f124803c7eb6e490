"""The lazy path against the whole path: one version judged from a packument read lazily
(`npm.lazydoc`, what a tarball's admission reads) is judged exactly as in the whole packument
parsed whole (what a packument request reads): the same admission or denial with the same
reason, the same digests and tarball URL for the mirror job, the same bytes served.

The packuments are real-shaped and large: thousands of versions with the fields npm's registry
writes (dist with SRI and shasum and registry signatures, publishers, install scripts,
deprecations, prereleases, non-ASCII text), and the hostile ones a registry can send (versions
off the origin, without digests, keys that are no version, manifests that are not objects),
beside a private packument holding mirrored copies, one of them withdrawn from public.
"""

from __future__ import annotations

import base64
import hashlib
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from mirrorgate.gate import Gated, gate
from mirrorgate.npm.lazydoc import lazy_packument, reduced
from mirrorgate.npm.mirrormark import MirrorMark, with_mark
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import DEFAULT_RULES, Rules, parse_keys, parse_rules
from mirrorgate.rules.takeover import HISTORY_FIELDS, History
from tests.rules.signing import SigningKey, keys_document
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_package, make_version

UPSTREAM = "http://127.0.0.1:9/"
ORIGIN = Origin.of(UPSTREAM)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
KEY = SigningKey()
KEYS = parse_keys(keys_document(KEY))

EVERY_PROTECTION = """
[integrity]
minimum = "sha512"
[age]
minimum = "3d"
[deny]
packages = ["huge@>=2.3.0 <2.4.0", "huge@7.0.0-dev.5"]
[install_scripts]
block = true
[provenance]
continuity = "quarantine"
window = 3
quarantine = "2w"
[publisher]
change = "deny"
[signatures]
missing = "deny"
"""


def _digests(name: str, version: str) -> tuple[str, str]:
    body = f"{name}@{version} tarball".encode()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(body).digest()).decode()
    return integrity, hashlib.sha1(body, usedforsecurity=False).hexdigest()


def _version_keys(rng: random.Random, count: int) -> list[str]:
    """Versions in publish order, as a long-lived package has them: patches, minors, majors,
    nightlies of the next patch."""
    found: list[str] = []
    major, minor, patch = 1, 0, 0
    while len(found) < count:
        if found and rng.random() < 0.3:
            found.append(f"{major}.{minor}.{patch + 1}-dev.{len(found)}")
            continue
        draw = rng.random()
        if draw < 0.02:
            major, minor, patch = major + 1, 0, 0
        elif draw < 0.25:
            minor, patch = minor + 1, 0
        else:
            patch += 1
        found.append(f"{major}.{minor}.{patch}")
    return found


def real_shaped(name: str, count: int, seed: int) -> dict[str, Any]:
    """A public packument of `count` versions shaped as npm's registry writes them."""
    rng = random.Random(seed)
    keys = _version_keys(rng, count)
    start = NOW - timedelta(days=9 * 365)
    versions: dict[str, Any] = {}
    times: dict[str, str] = {"created": start.isoformat()}
    publishers = ["ana", "ana", "ana", "björn"]  # a second publisher now and then
    for order, version in enumerate(keys):
        integrity, shasum = _digests(name, version)
        published = start + (NOW - start) * (order + 1) / (count + 1)
        if order >= count - 3:
            published = NOW - timedelta(hours=order % 5 + 1)  # the newest: under the cooldown
        publisher = publishers[order % len(publishers)] if order % 97 else "mallory"
        dist: dict[str, Any] = {
            "integrity": integrity, "shasum": shasum,
            "tarball": f"{UPSTREAM}{name}/-/{name}-{version}.tgz",
            "fileCount": 3 + order % 40, "unpackedSize": 1_000 + order * 31,
            "signatures": KEY.sign(name, version, integrity) if order % 53 else [],
        }
        if order % 61 == 7:
            del dist["integrity"]  # sha1 only, as before 2017
        if order % 89 == 11:
            dist["tarball"] = f"https://elsewhere.example/{name}-{version}.tgz"  # off origin
        manifest: dict[str, Any] = {
            "name": name, "version": version,
            "description": f"{name}: grüße, 日本語 and plain words, release {version}",
            "main": "index.js", "license": "MIT",
            "repository": {"type": "git", "url": f"git+https://example.com/{name}.git"},
            "dependencies": {f"dep-{d}": f"^{d}.{order % 7}.0" for d in range(order % 9)},
            "devDependencies": {f"@types/dev-{d}": f"~{d}.0.0" for d in range(10 + order % 30)},
            "scripts": {"test": "node test.js",
                        **({"postinstall": "node build.js"} if order % 17 == 3 else {})},
            "engines": {"node": ">=14"},
            "_npmUser": {"name": publisher, "email": f"{publisher}@example.com"},
            "maintainers": [{"name": publisher, "email": f"{publisher}@example.com"}],
            "contributors": [{"name": f"person {c}", "email": f"person{c}@example.com",
                              "url": f"https://example.com/~person{c}"}
                             for c in range(10 + order % 20)],
            "gitHead": hashlib.sha1(version.encode(), usedforsecurity=False).hexdigest(),
            "_id": f"{name}@{version}",
            "dist": dist,
        }
        if order % 13 == 5:
            manifest["deprecated"] = "this line is no longer maintained"
        if order % 29 == 2:
            manifest["_hasShrinkwrap"] = False
            manifest["bin"] = {name: "cli.js"}
        if order % 211 == 9:
            manifest["_mirrorgate"] = {"v": 1, "source": "public", "integrity": integrity}
        versions[version] = manifest
        if order % 71 != 4:  # a few versions without a time, as old registries left them
            times[version] = published.isoformat().replace("+00:00", "Z")
    versions["not-a-version"] = {"name": name, "version": "x"}
    versions["3.0.0-bad"] = "a manifest that is not an object"
    times["modified"] = NOW.isoformat()
    return {"_id": name, "name": name, "description": f"{name}, a package with a history",
            "dist-tags": {"latest": keys[-4], "next": keys[-1]}, "versions": versions,
            "time": times, "maintainers": [{"name": "ana", "email": "ana@example.com"}],
            "readme": "# Usage\n\n" + "Words about options and examples. " * 3_000,
            "readmeFilename": "README.md", "license": "MIT"}


def mirrored_copies(public: dict[str, Any], every: int) -> dict[str, Any]:
    """A private packument holding the worker's copies of every `every`th public version, one
    of them with bytes public no longer lists (withdrawn there), one that public never had."""
    versions: dict[str, Any] = {}
    times: dict[str, str] = {}
    for order, (version, manifest) in enumerate(list(public["versions"].items())[::every]):
        if not isinstance(manifest, dict) or "integrity" not in manifest.get("dist", {}):
            continue
        integrity = manifest["dist"]["integrity"]
        if order == 1:  # stored bytes other than those public lists under the version
            integrity = _digests("other bytes", version)[0]
            manifest = {**manifest, "dist": {**manifest["dist"], "integrity": integrity}}
        mark = MirrorMark(published=public["time"].get(version), integrity=integrity)
        versions[version] = with_mark(manifest, mark)
        times[version] = NOW.isoformat()
    gone = "0.0.1-withdrawn"
    versions[gone] = with_mark({"name": public["name"], "version": gone,
                                "dist": {"integrity": _digests("gone", gone)[0]}},
                               MirrorMark(published="2020-01-01T00:00:00Z",
                                          integrity=_digests("gone", gone)[0]))
    return {"name": public["name"], "versions": versions, "time": times,
            "dist-tags": {"latest": gone}}


def _whole(name: str, private: dict[str, Any] | None, body: bytes, rules: Rules) -> Gated:
    return gate(parse_name(name), private, orjson.loads(body), rules=rules, now=NOW,
                origin=ORIGIN, keys=KEYS, withdrawn={"9.9.9": "2025-01-01T00:00:00Z"})


def _lazily(name: str, private: dict[str, Any] | None, body: bytes, rules: Rules,
            version: str) -> Gated:
    document = lazy_packument(body)
    assert document is not None
    return gate(parse_name(name), private, document, rules=rules, now=NOW, origin=ORIGIN,
                keys=KEYS, withdrawn={"9.9.9": "2025-01-01T00:00:00Z"}, only=version)


def assert_same_verdicts(name: str, private: dict[str, Any] | None, body: bytes,
                         rules: Rules, sample: int) -> Gated:
    whole = _whole(name, private, body, rules)
    listed = list(orjson.loads(body)["versions"]) + list((private or {}).get("versions", {}))
    chosen = sorted(set(listed))
    if len(chosen) > sample:
        chosen = random.Random(len(body)).sample(chosen, sample)
    for version in [*chosen, "404.0.0"]:
        alone = _lazily(name, private, body, rules, version)
        expected = whole.versions.get(version)
        assert alone.versions.get(version) == expected, version
        assert list(alone.versions) == ([version] if expected is not None else [])
        assert alone.time.get(version) == whole.time.get(version), version
        assert alone.first_party == whole.first_party
        assert alone.withdrawals.get(version) == whole.withdrawals.get(version)
        assert alone.skipped <= whole.skipped
    return whole


@pytest.mark.parametrize("rules_text", ["", EVERY_PROTECTION], ids=["defaults", "every-rule"])
def test_a_version_read_lazily_is_judged_as_in_the_whole_packument(rules_text: str) -> None:
    rules = parse_rules(rules_text) if rules_text else DEFAULT_RULES
    public = real_shaped("huge", 3_000, seed=47)
    body = orjson.dumps(public)
    assert len(body) > 8_000_000  # the size of a compiler's or an SDK's packument
    whole = assert_same_verdicts("huge", None, body, rules, sample=25)
    assert whole.denied  # both outcomes are exercised
    assert whole.survivors
    if rules_text:  # every rule that can deny did, somewhere in the packument
        fired = set(whole.denials)
        assert {"install-scripts", "minimum-age", "deny-list", "digest-floor",
                "tarball-origin", "registry-signature", "publisher-change"} <= fired, fired


@pytest.mark.parametrize("rules_text", ["", EVERY_PROTECTION], ids=["defaults", "every-rule"])
def test_every_version_of_a_packument_with_mirrored_copies_is_judged_alike(
        rules_text: str) -> None:
    rules = parse_rules(rules_text) if rules_text else DEFAULT_RULES
    public = real_shaped("huge", 200, seed=7)
    private = mirrored_copies(public, every=9)
    whole = assert_same_verdicts("huge", private, orjson.dumps(public), rules, sample=10_000)
    assert whole.withdrawals  # the copy of bytes public no longer lists, and the version gone
    assert any(record.private for record in whole.versions.values())


def test_what_msgspec_would_let_through_is_parsed_whole() -> None:
    body = orjson.dumps(real_shaped("small", 30, seed=1))
    # bytes that are not UTF-8 inside a string msgspec skips, and nesting beyond its limit
    assert lazy_packument(body.replace("grüße".encode(), b"gr\xff\xfee", 1)) is None
    deep = body[:-1] + b',"x":' + b"[" * 1_000 + b"]" * 1_000 + b"}"
    assert lazy_packument(deep) is None
    assert lazy_packument(b"[1, 2]") is None
    assert lazy_packument(b'{"name": "small", "versions": ') is None


def test_a_value_orjson_refuses_is_refused_when_it_is_read() -> None:
    public = real_shaped("small", 30, seed=1)
    body = orjson.dumps(public).replace(b'"unpackedSize":1000,', b'"unpackedSize":1e400,', 1)
    document = lazy_packument(body)
    assert document is not None
    first = next(iter(public["versions"]))
    with pytest.raises(orjson.JSONDecodeError):
        document["versions"][first]


def test_the_takeover_history_parses_the_fields_it_reads_and_no_others() -> None:
    public = real_shaped("small", 30, seed=1)
    # a value no parse takes outside the history's fields: never read, so never refused
    body = orjson.dumps(public).replace(b'"engines":{"node":">=14"}', b'"engines":1e400')
    document = lazy_packument(body)
    assert document is not None
    history = reduced(document["versions"], HISTORY_FIELDS)
    whole = orjson.loads(orjson.dumps(public))["versions"]
    assert history == {version: ({field: manifest[field] for field in HISTORY_FIELDS
                                  if field in manifest} if isinstance(manifest, dict)
                                 else manifest) for version, manifest in whole.items()}


def test_the_takeover_history_read_lazily_is_the_one_read_whole() -> None:
    """The publisher and provenance signals read releases of a history ordered by the times
    alone, each release's fields parsed when a rule reads it: the same releases, in the same
    order, as from the whole parse (a manifest that is no object and a version without a time
    left out alike; some releases with provenance, a second publisher, a `maintainers` list
    standing in for `_npmUser`)."""
    public = real_shaped("small", 300, seed=3)
    for at, manifest in enumerate(public["versions"].values()):
        if isinstance(manifest, dict) and at % 7 == 1:
            manifest["dist"]["attestations"] = {
                "url": "https://example.com/attestations",
                "provenance": {"predicateType": "https://slsa.dev/provenance/v1"}}
        if isinstance(manifest, dict) and at % 11 == 4:
            del manifest["_npmUser"]
    document = lazy_packument(orjson.dumps(public))
    assert document is not None
    lazily = History.of(reduced(document["versions"], HISTORY_FIELDS), document["time"])
    whole = History.of(public["versions"], public["time"])
    assert lazily.index == whole.index
    assert "3.0.0-bad" not in lazily.index
    for version in public["versions"]:
        assert lazily.get(version) == whole.get(version), version
        assert lazily.before(version, 5) == whole.before(version, 5), version
        assert lazily.after(version) == whole.after(version), version
    assert any(release.provenance for release in whole.after(next(iter(whole.index))))


def test_the_takeover_history_parses_only_the_releases_a_rule_reads() -> None:
    """A history field no parse takes (`1e400` in one release's `dist`) is refused when that
    release is read, as a whole parse refuses the document, and never read otherwise (the one
    departure of a lazily read packument, docs/serving.md)."""
    public = real_shaped("small", 40, seed=1)
    listed = [version for version in public["time"] if version in public["versions"]
              and isinstance(public["versions"][version], dict)]
    spoiled_version = listed[20]
    body = orjson.dumps(public).replace(
        f'"unpackedSize":{public["versions"][spoiled_version]["dist"]["unpackedSize"]},'.encode(),
        b'"unpackedSize":1e400,', 1)
    document = lazy_packument(body)
    assert document is not None
    history = History.of(reduced(document["versions"], HISTORY_FIELDS), document["time"])
    assert history.get(listed[5]) is not None  # a release far from it reads as before
    with pytest.raises(orjson.JSONDecodeError):
        history.get(spoiled_version)


def test_a_document_without_a_versions_object_is_parsed_whole() -> None:
    # npm's tombstone, a rate limiter's answer: the whole parse's refusal names their keys
    assert lazy_packument(b'{"name":"gone","time":{"unpublished":{"time":"2020"}}}') is None
    assert lazy_packument(b'{"error":"rate limited"}') is None
    assert lazy_packument(b'{"name":"odd","versions":[]}') is None


# --- through the proxy ---------------------------------------------------------------------


async def test_a_cold_tarball_is_admitted_by_its_version_alone_and_the_packument_stays_whole(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # A lockfile install asks for tarballs only: each is judged from its own version, public's
    # packument fetched once for both versions of the name, and the packument npm asks for
    # afterwards is every version, gated whole, with the same verdicts.
    versions = [make_version("many", f"1.{minor}.0") for minor in range(40)]
    versions.append(make_version("many", "2.0.0", digests="none"))  # denied: no digest
    public_registry.add(make_package("many", versions))
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)

    first = await proxy.get("npm/many/-/many-1.3.0.tgz")
    second = await proxy.get("npm/many/-/many-1.39.0.tgz")
    assert "many" not in proxy.server.packuments.cache  # no one-version gating stands for it
    denied = await proxy.get("npm/many/-/many-2.0.0.tgz")  # its 403 names the others: whole

    assert (first.status, second.status, denied.status) == (200, 200, 403)
    assert "1.39.0" in denied.json()["error"]
    packuments = [seen for seen in public_registry.requests if "/-/" not in seen.path]
    assert len(packuments) == 1  # the bytes fetched for 1.3.0 served the other two fills
    whole = (await proxy.get("npm/many")).json()
    assert len(whole["versions"]) == 40
    assert list(whole["policyRestrictions"]["versions"]) == ["2.0.0"]


@pytest.mark.parametrize("where", ["name", "time"])
async def test_a_value_no_whole_parse_takes_fails_the_tarballs_fill_as_it_fails_the_packument(
    public_registry: FixtureRegistry, start_proxy: StartProxy, where: str,
) -> None:
    # A number past a double's range where the one-version fill reads it: the same 502 as
    # the whole parse gives the packument, never a 500 or an admission
    public_registry.add(make_package("overflow", ["1.0.0"]))
    body = orjson.dumps(public_registry.packument("overflow"))
    spoiled = (body.replace(b'"name":"overflow"', b'"name":1e400', 1) if where == "name"
               else body.replace(b'"time":{', b'"time":{"x":1e400,', 1))
    assert spoiled != body
    public_registry.fault("/overflow", Fault(body=spoiled), exact=True)
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)

    tarball = await proxy.get("npm/overflow/-/overflow-1.0.0.tgz")
    packument = await proxy.get("npm/overflow")

    assert (tarball.status, packument.status) == (502, 502)


async def test_by_default_a_cold_tarball_is_judged_alone_and_a_young_package_quarantined(
    public_registry: FixtureRegistry, start_proxy: StartProxy,
) -> None:
    # No rules file: the capability signals read the package's first publish, not its
    # history, until the bytes show a capability that could have been gained, so a lockfile
    # install's tarballs stay on the one-version path. A week-old package's release whose
    # install code downloads is refused from its version alone (nothing vouches for it);
    # the same package's twin whose install only prints a line is admitted; a package years
    # old whose packument lacks `created` is known old by its first version's time, which
    # one version's gating carries (its own time is two days: judged young without it).
    now = datetime.now(UTC)
    printing = {"index.js": b"module.exports = 1;\n", "setup.js": b"console.log('set up');\n"}
    fetching = {**printing, "setup.js": b"require('https').get('https://payload.test/x');\n"}

    def release(name: str, first: datetime, files: dict[str, bytes]) -> None:
        public_registry.add(make_package(name, [
            make_version(name, "1.0.0", files=printing, published=first),
            make_version(name, "1.0.1", files=files, published=now - timedelta(days=2),
                         scripts={"postinstall": "node setup.js"})]))

    release("young-setup", now - timedelta(days=7), fetching)
    release("young-print", now - timedelta(days=7), printing)
    release("old-setup", now - timedelta(days=3 * 365), printing)
    document = public_registry.packument("old-setup")
    del document["time"]["created"]
    public_registry.fault("/old-setup", Fault(body=orjson.dumps(document)), exact=True)
    proxy = await start_proxy(public_registry.url, cache_ttl=60.0)

    young = await proxy.get("npm/young-setup/-/young-setup-1.0.1.tgz")
    printed = await proxy.get("npm/young-print/-/young-print-1.0.1.tgz")
    old = await proxy.get("npm/old-setup/-/old-setup-1.0.1.tgz")

    assert (young.status, young.json()["rule"]) == (403, "new-capability")
    assert "install-time code gains network" in young.json()["reason"]
    assert (printed.status, old.status) == (200, 200)
    for name in ("young-print", "old-setup"):  # judged alone: no whole fill
        assert name not in proxy.server.packuments.cache
        assert f"{name}@1.0.1" in proxy.server.packuments.alone
    again = await proxy.get("npm/young-setup/-/young-setup-1.0.1.tgz")  # the verdict kept
    assert (again.status, again.json()["rule"]) == (403, "new-capability")


def test_repeated_keys_are_read_lazily_as_a_whole_parse_reads_them() -> None:
    # JSON lets a key repeat; every reader here keeps the last value (in the first one's
    # place): a forged first copy of a version, or of `versions`, is what neither path reads
    public = real_shaped("twice", 12, seed=3)
    body = orjson.dumps(public)
    forged = orjson.dumps({"dist": {"tarball": "https://elsewhere.example/x.tgz"}})
    first = next(iter(public["versions"]))
    body = body.replace(b'"versions":{', b'"versions":{"' + first.encode() + b'":' + forged
                        + b",", 1)
    body = body.replace(b'"versions":', b'"versions":{"9.9.9":' + forged + b'},"versions":', 1)
    assert orjson.loads(body)["versions"][first] == public["versions"][first]
    rules = parse_rules(EVERY_PROTECTION)
    assert_same_verdicts("twice", None, body, rules, sample=100)
    assert _lazily("twice", None, body, rules, "9.9.9").versions == {}
