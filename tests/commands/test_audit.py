"""`mirrorgate audit`'s core: what was mirrored, checked against its bytes and today's rules.

Each case mirrors the standard tree the real way (prewarm's jobs run by the real worker) into
the embedded file store or a real Verdaccio, then does what an attacker or an operator does:
changes a tarball on disk, deletes one, adds a deny entry. The audit must name each, and
leave everything where it was.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from structlog.testing import capture_logs

from mirrorgate.commands.audit import Finding, Result, audit, search_names
from mirrorgate.commands.parts import open_parts
from mirrorgate.commands.prewarm import Outcome
from mirrorgate.config import Settings
from mirrorgate.upstream.filestore import FileStore
from tests.commands.mirrored import prewarm_with_the_worker, published_tree, settings_for
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.licensed import relicensed
from tests.servers.packages import make_package
from tests.servers.verdaccio import Verdaccio


def findings(results: list[Result]) -> dict[str, set[Finding]]:
    found: dict[str, set[Finding]] = {}
    for result in results:
        found.setdefault(result.label, set()).add(result.finding)
    return found


def deny(settings: Settings, tmp_path: Path, entry: str) -> Settings:
    rules = tmp_path / "rules-today.toml"
    rules.write_text(f'[deny]\npackages = ["{entry}"]\n', encoding="utf-8")
    return dataclasses.replace(settings, rules_file=rules)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


async def run_audit(settings: Settings, names: list[str]) -> list[Result]:
    async with open_parts(settings) as parts:
        return await audit(names, source=parts.source, private=parts.private,
                           max_tarball_bytes=settings.max_tarball_bytes)


async def test_the_audit_of_the_file_store_finds_a_changed_tarball_a_missing_one_and_a_new_denial(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path)
    await prewarm_with_the_worker(settings, list(tree.resolved.items()))
    store = tmp_path / "store"
    changed = store / "delta" / "tarballs" / "delta-0.4.2.tgz"
    changed.write_bytes(changed.read_bytes()[:-10] + b"0123456789")  # same size, other bytes
    (store / "zeta" / "tarballs" / "zeta-1.0.1.tgz").unlink()
    today = deny(settings, tmp_path, "gamma@3.1.0")
    before = snapshot(store)

    names = await FileStore(store).names()
    assert sorted(names) == sorted(tree.resolved)
    results = await run_audit(today, names)

    assert findings(results) == {
        "alpha@1.2.0": {Finding.OK},
        "@fixture/beta@2.1.3": {Finding.OK},
        "gamma@3.1.0": {Finding.REFUSED},
        "delta@0.4.2": {Finding.TAMPERED},
        "epsilon@1.2.0": {Finding.OK},
        "zeta@1.0.1": {Finding.MISSING_TARBALL},
    }
    refused = next(r for r in results if r.finding is Finding.REFUSED)
    assert refused.detail.startswith("deny")
    tampered = next(r for r in results if r.finding is Finding.TAMPERED)
    assert tampered.digests is not None
    assert tampered.digests[0] == public_registry.package("delta").version("0.4.2").integrity
    assert snapshot(store) == before  # read-only: nothing moved, nothing deleted


async def test_the_audit_still_checks_the_bytes_with_the_public_registry_down(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path)
    await prewarm_with_the_worker(settings, list(tree.resolved.items()))
    changed = tmp_path / "store" / "epsilon" / "tarballs" / "epsilon-1.2.0.tgz"
    changed.write_bytes(b"not the tarball")
    public_registry.stop()

    results = await run_audit(settings, await FileStore(tmp_path / "store").names())

    assert findings(results)["epsilon@1.2.0"] == {Finding.TAMPERED}
    assert sum(r.finding is Finding.OK for r in results) == len(tree.resolved) - 1


async def test_a_registry_is_walked_through_its_search_and_a_version_changed_in_its_storage_found(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path, MIRRORGATE_PRIVATE_UPSTREAM=verdaccio.url,
                            MIRRORGATE_PRIVATE_TOKEN=verdaccio.token)
    await prewarm_with_the_worker(settings, list(tree.resolved.items()))
    stored = verdaccio.storage / "alpha" / "alpha-1.2.0.tgz"
    stored.write_bytes(stored.read_bytes()[::-1])
    today = deny(settings, tmp_path, "@fixture/beta@2.1.3")

    async with open_parts(today) as parts:
        assert parts.gate.upstreams.private is not None
        names = [name async for name in search_names(parts.gate.upstreams.private)]
        assert sorted(names) == sorted(tree.resolved)
        results = await audit(names, source=parts.source, private=parts.private,
                              max_tarball_bytes=today.max_tarball_bytes)

    found = findings(results)
    assert found.pop("alpha@1.2.0") == {Finding.TAMPERED}
    assert found.pop("@fixture/beta@2.1.3") == {Finding.REFUSED}
    assert found == {label: {Finding.OK} for label in found}
    assert len(found) == len(tree.resolved) - 2


async def test_prewarm_and_audit_honour_the_license_rule(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    # the standard tree declares MIT throughout: an allow list without MIT lets prewarm mirror
    # nothing (the control: the same prewarm without it mirrors the tree), and once it is
    # mirrored, a license rule added later makes the audit name every copy as refused
    tree = published_tree(public_registry)
    settings = settings_for(public_registry, tmp_path)
    rules = tmp_path / "licenses.toml"
    rules.write_text('[license]\nallow = ["ISC"]\n', encoding="utf-8")
    strict = dataclasses.replace(settings, rules_file=rules)

    refused = await prewarm_with_the_worker(strict, list(tree.resolved.items()))
    assert refused
    assert {result.outcome for result in refused} == {Outcome.REFUSED}, refused
    assert "not on the license allow list" in refused[0].detail
    assert await FileStore(tmp_path / "store").names() == []
    await prewarm_with_the_worker(settings, list(tree.resolved.items()))
    results = await run_audit(strict, await FileStore(tmp_path / "store").names())

    assert all(found == {Finding.REFUSED} for found in findings(results).values()), results
    assert len(findings(results)) == len(tree.resolved)
    assert all("license" in result.detail for result in results)


async def test_the_worker_never_mirrors_a_tarball_declaring_another_license_than_its_manifest(
    public_registry: FixtureRegistry, tmp_path: Path,
) -> None:
    # prewarm admits it by its manifest (MIT); the worker reads the bytes it would publish
    public_registry.add(make_package("lic-hidden", [relicensed("lic-hidden", "GPL-3.0-only")]),
                        make_package("lic-honest", [relicensed("lic-honest", "MIT")]))
    settings = settings_for(public_registry, tmp_path)
    rules = tmp_path / "licenses.toml"
    rules.write_text('[license]\ndeny = ["GPL-*"]\n', encoding="utf-8")

    with capture_logs() as logs:
        results = await prewarm_with_the_worker(
            dataclasses.replace(settings, rules_file=rules),
            [("lic-hidden", "1.0.0"), ("lic-honest", "1.0.0")])

    outcomes = {result.name: result for result in results}
    assert outcomes["lic-hidden"].outcome is Outcome.REFUSED
    [retired] = [line for line in logs if line["event"] == "mirror_retired"]
    assert retired["reason"] == "license"
    assert retired["detail"].startswith("lic-hidden@1.0.0: the registry's manifest declares "
                                        "MIT, but the package.json in its tarball")
    assert outcomes["lic-honest"].outcome is Outcome.PUBLISHED  # the control
    assert await FileStore(tmp_path / "store").names() == ["lic-honest"]
