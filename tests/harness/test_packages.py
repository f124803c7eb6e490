"""Fixture packages: real, deterministic tarballs and packuments of the sizes benchmarks need."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time

import nodesemver
import orjson

from tests.servers.packages import (
    FixtureVersion,
    fresh_version,
    install_script_version,
    make_package,
    make_version,
    no_digest_version,
    realistic_package,
    sha1_only_version,
    standard_tree,
)

BASE = "http://127.0.0.1:9/"


def test_a_tarball_is_a_gzipped_tar_of_package_json_and_files_with_fixed_bytes() -> None:
    first = make_version("alpha", "1.0.0", {"gamma": "^3.0.0"}).tarball
    again = make_version("alpha", "1.0.0", {"gamma": "^3.0.0"}).tarball
    assert first == again
    assert gzip.decompress(first)[:len("package/")] == b"package/"
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        members = tar.getmembers()
        extracted = tar.extractfile("package/package.json")
        assert extracted is not None
        manifest = json.loads(extracted.read())
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {m.mtime for m in members} == {499162500}
    assert manifest["name"] == "alpha"
    assert manifest["dependencies"] == {"gamma": "^3.0.0"}


def test_dist_advertises_sha512_integrity_sha1_shasum_and_the_file_count() -> None:
    version = make_version("alpha", "1.0.0")
    dist = version.document(BASE)["dist"]
    assert dist["tarball"] == "http://127.0.0.1:9/alpha/-/alpha-1.0.0.tgz"
    assert dist["integrity"].startswith("sha512-")
    assert len(dist["shasum"]) == 40
    with tarfile.open(fileobj=io.BytesIO(version.tarball), mode="r:gz") as tar:
        assert dist["fileCount"] == len(tar.getmembers()) == 4  # with the realistic payload
        assert dist["unpackedSize"] == sum(m.size for m in tar.getmembers())


def test_tarballs_are_realistically_sized_by_default_from_1_kb_up() -> None:
    sizes = [len(make_version("pkg", f"1.0.{patch}").tarball) for patch in range(40)]
    assert min(sizes) > 1024, "a registry content-codes bodies over 1 KB: fixtures must too"
    assert max(sizes) > 100_000
    assert len(set(sizes)) > 5
    assert len(make_version("pkg", "1.0.0", size=0).tarball) < 1024
    big = make_version("pkg", "1.0.0", size=3_000_000).tarball
    assert 2_900_000 < len(big) < 3_100_000


def test_special_versions_advertise_only_what_they_say() -> None:
    assert "integrity" not in no_digest_version("a", "1.0.0").dist(BASE)
    assert "shasum" not in no_digest_version("a", "1.0.0").dist(BASE)
    assert set(sha1_only_version("a", "1.0.0").dist(BASE)) >= {"shasum"}
    assert "integrity" not in sha1_only_version("a", "1.0.0").dist(BASE)
    scripted = install_script_version("a", "1.0.0").manifest
    assert "postinstall" in scripted["scripts"]
    assert scripted["hasInstallScript"] is True
    package = make_package("a", ["1.0.0", fresh_version("a", "1.1.0")])
    created = package.packument(BASE)["time"]
    assert created["1.0.0"].startswith("2020-01-01")
    assert created["1.1.0"] > created["1.0.0"]


def test_a_scoped_packages_tarball_is_named_without_its_scope() -> None:
    package = make_package("@fixture/beta", ["2.1.3"])
    url = package.packument(BASE)["versions"]["2.1.3"]["dist"]["tarball"]
    assert url == "http://127.0.0.1:9/@fixture/beta/-/beta-2.1.3.tgz"


def test_latest_skips_prereleases_and_next_points_at_a_newer_one() -> None:
    package = make_package("p", ["1.0.0", "1.10.0", "1.9.0", "2.0.0-beta.2", "2.0.0-beta.10"])
    assert package.dist_tags == {"latest": "1.10.0", "next": "2.0.0-beta.10"}
    assert package.sorted_versions()[-1] == "2.0.0-beta.10"


def test_a_version_can_be_replaced_with_a_dist_that_lies_about_its_bytes() -> None:
    package = make_package("p", ["1.0.0"])
    honest = package.version("1.0.0")
    lying = honest.with_dist(integrity="sha512-" + "A" * 86 + "==")
    changed = package.with_version(lying)
    assert changed.version("1.0.0").tarball == honest.tarball
    assert changed.packument(BASE)["versions"]["1.0.0"]["dist"]["integrity"] != honest.integrity
    assert package.packument(BASE)["versions"]["1.0.0"]["dist"]["integrity"] == honest.integrity


def test_an_abbreviated_packument_keeps_only_the_install_fields() -> None:
    package = make_package("p", [install_script_version("p", "1.0.0", bin={"p": "index.js"})])
    document = package.abbreviated(BASE)
    assert set(document) == {"name", "modified", "dist-tags", "versions"}
    assert set(document["versions"]["1.0.0"]) == {
        "name", "version", "dependencies", "bin", "dist", "hasInstallScript"}


def test_a_realistic_packument_is_about_the_size_of_expresss_and_quick_to_build() -> None:
    started = time.perf_counter()
    package = realistic_package("express")
    body = orjson.dumps(package.packument(BASE))
    assert time.perf_counter() - started < 2.0
    assert 650_000 < len(body) < 850_000
    assert len(package.versions) == 300
    assert len(orjson.loads(body)["time"]) == 302


def test_a_ten_megabyte_packument_is_built_in_seconds() -> None:
    started = time.perf_counter()
    package = realistic_package("huge", versions=3_500, manifest_size=2_800)
    body = orjson.dumps(package.packument(BASE))
    assert time.perf_counter() - started < 10.0
    assert 9_000_000 < len(body) < 12_000_000


def test_the_standard_tree_resolves_to_non_latest_versions_through_real_ranges() -> None:
    tree = standard_tree()
    packages = {package.name: package for package in tree.packages}
    assert len(packages) >= 6
    assert any(name.startswith("@fixture/") for name in packages)

    resolved: dict[str, str] = {}
    wanted = list(tree.dependencies.items())
    while wanted:
        name, spec = wanted.pop()
        choice = nodesemver.max_satisfying(list(packages[name].versions), spec, loose=False)
        assert resolved.setdefault(name, choice) == choice
        version: FixtureVersion = packages[name].version(choice)
        wanted.extend(version.manifest["dependencies"].items())

    assert resolved == tree.resolved
    not_latest = [n for n, v in resolved.items() if v != packages[n].dist_tags["latest"]]
    assert {"alpha", "@fixture/beta", "delta"} <= set(not_latest)
