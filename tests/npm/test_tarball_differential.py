"""mirrorgate's tarball reader against npm's own: every tarball of the corpus is listed by
node-tar's Parser and extracted by pacote (npm's copies, found from `npm root -g`, the code an
install runs; tests/npm/nodetar.js), and read by `npm.tarball`; each extracted package.json is
parsed by @npmcli/package-json and by `npm.packagejson`. The two agree entry for entry, file
for file and value for value, or mirrorgate refuses the tarball with a reason.

The corpus: what npm, pnpm 10 and 8, yarn 1, yarn 4 and bun pack today (packed here, by each
client), 23 real tarballs from the public registry (tests/npm/fixtures/registry: old npm's
pax-on-every-entry shape among them), and the hostile shapes a publisher could send."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import random
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard

from mirrorgate.npm.packagejson import PackageJsonError, parse_package_json
from mirrorgate.npm.tarball import Entry, TarballReader
from tests.npm.tarshapes import END, HOOK, PLAIN, file, header, manifest, pax
from tests.servers.package_managers import CLIENTS_DIR, client
from tests.servers.packages import build_tarball, entry, tar

FIXTURES = Path(__file__).parent / "fixtures" / "registry"
REGISTRY = sorted(path.name for path in FIXTURES.glob("*.tgz"))
PACKERS = ("npm", "pnpm", "pnpm8", "yarn1", "yarn4", "bun")
NODE_EMITS = frozenset(("File", "Link", "SymbolicLink", "CharacterDevice", "BlockDevice",
                        "Directory", "FIFO", "ContiguousFile", "GNUDumpDir"))


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _noise(size: int) -> bytes:
    """Incompressible, and the same bytes every run."""
    return b"".join(hashlib.sha512(b"%d" % index).digest() for index in range(size // 64))


def _hidden_behind(carrier: bytes) -> bytes:
    """A tar whose README's data is itself the tar of a package.json with a postinstall."""
    hidden = tar([entry("package/package.json", HOOK)]).rstrip(b"\0")
    hidden += b"\0" * (-len(hidden) % 512)
    return _gz(carrier + file("package/README", hidden) + END)


def _deep() -> bytes:
    path = "package/" + "d/" * 1100 + "x.js"
    return _gz(pax([("path", path)]) + file("package/deep.js", b"1") + END)


_INVALID_UTF8 = (b"\xff", b"\xc0\x80", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                 b"\xf0\x9f\x98", b"\xe0\x80\xaf", b"\x80\x80", b"\xef\xbf\xbe",
                 b"\xf8\x88\x80\x80\x80", b"\xe2\x28\xa1", b"\xf0\x28\x8c\x28")


def _utf8_edges() -> bytes:
    """One bundled package.json per invalid UTF-8 sequence (overlong, a surrogate, past
    U+10FFFF, cut short, stray continuation bytes), inside a string and inside a key."""
    entries = file("package/package.json", PLAIN)
    for index, raw in enumerate(_INVALID_UTF8):
        document = b'{"name": "p%d", "d\xc3%s": "<%s>", "scripts": {"postinstall": "x"}}' % (
            index, raw, raw)
        entries += file(f"package/node_modules/p{index}/package.json", document)
    return _gz(entries + END)


# name -> (bytes, None when mirrorgate must read it, else words its refusal holds)
HOSTILE: dict[str, Callable[[], tuple[bytes, str | None]]] = {
    "plain-tar": lambda: (tar([entry("package/package.json", PLAIN)]), None),
    "gzip-members": lambda: (
        _gz(file("package/index.js", b"1")) + _gz(file("package/package.json", HOOK) + END),
        None),
    "gzip-zero-padding": lambda: (build_tarball({"package.json": PLAIN}) + b"\0" * 300, None),
    "gzip-trailing-bytes": lambda: (build_tarball({"package.json": PLAIN}) + b"junk",
                                    "not a gzip member"),
    "zstd-bundled-postinstall": lambda: (zstandard.ZstdCompressor().compress(tar([
        entry("package/package.json", PLAIN),
        entry("package/node_modules/inner/package.json", HOOK)])), None),
    "bzip2": lambda: (bz2.compress(tar([entry("package/package.json", HOOK),
                                        entry("package/blob", _noise(4096))])),
                      "tar header"),
    "bom-package-json": lambda: (_gz(file("package/package.json", b"\xef\xbb\xbf" + HOOK) + END),
                                 None),
    "bad-utf8-package-json": lambda: (_gz(file("package/package.json", manifest(
        description="caf\xe9", scripts={"postinstall": "x"}).replace(b"\\u00e9", b"\xe9\xff"))
        + END), None),
    "utf8-edge-cases": lambda: (_utf8_edges(), None),
    "lone-surrogate-package-json": lambda: (_gz(file(
        "package/package.json", b'{"name":"x","description":"\\ud800 \\udfff",'
        b'"scripts":{"postinstall":"node e.js"}}') + END), None),
    "nan-package-json": lambda: (_gz(file("package/package.json", b'{"a": NaN}') + END), None),
    "old-npm-pax": lambda: (_gz(
        pax([("path", "package/package.json"), ("NODETAR.depth", "1"),
             ("NODETAR.type", "File"), ("size", str(len(PLAIN)))])
        + file("package/package.json", PLAIN) + END), None),
    "pax-size-disagrees": lambda: (_hidden_behind(pax([("size", "0")])), "ustar size"),
    "pax-global-size": lambda: (_hidden_behind(pax([("size", "0")], b"g")), "global pax"),
    "pax-global-comment": lambda: (_gz(pax([("comment", "0123abcd")], b"g", "pax_global_header")
                                       + file("package/package.json", PLAIN) + END), None),
    "pax-type": lambda: (_gz(pax([("type", "2")]) + file("package/package.json", PLAIN) + END),
                         "type"),
    "pax-bad-length": lambda: (_gz(b"".join([
        file("PaxHeader/x", b"99 path=package/package.json\n", b"x"),
        file("package/README", HOOK)]) + END), None),
    "pax-invalid-utf8-path": lambda: (_gz(pax([("path", b"package/\xff.js")])
                                          + file("package/a.js", b"1") + END), None),
    "pax-unicode-path": lambda: (_gz(pax([("path", "package/ünï/ç☃dé.js")])
                                     + file("package/a.js", b"1") + END), None),
    "pax-oversized": lambda: (_gz(file("PaxHeader/x", b"0" * (1024 * 1024 + 1), b"x")
                                  + file("package/package.json", PLAIN) + END), "larger than"),
    "gnu-long-names": lambda: (tar([
        entry("package/" + "n" * 150 + "/package.json", HOOK),
        (_symlink("package/" + "l" * 120, "../" + "t" * 120))], tarfile.GNU_FORMAT), None),
    "gnu-longname-nul": lambda: (_gz(file("././@LongLink", b"package/a\0b\rc.js", b"L")
                                     + file("package/x.js", b"1") + END), None),
    "ustar-prefix": lambda: (_gz(file("package.json", PLAIN, prefix="package")
                                 + file("b" * 90 + ".js", b"1", prefix="package/" + "a" * 100)
                                 + END), None),
    "base-256-size": lambda: (_gz(header("package/package.json", 0, size_field=b"\x80"
                                         + len(PLAIN).to_bytes(11, "big"))
                                  + PLAIN + b"\0" * (-len(PLAIN) % 512) + END), None),
    "empty-size-fields": lambda: (_gz(
        header("package/lib/", 0, b"5", size_field=b"\0" * 12)
        + header("package/l", 0, b"2", linkname="x", size_field=b" " * 11 + b"\0")
        + file("package/package.json", PLAIN) + END), None),
    "bad-base-256": lambda: (_gz(header("package/package.json", 0, size_field=b"\x81"
                                        + b"\0" * 11) + END), "cannot decode"),
    "links-out-of-the-package": lambda: (_gz(
        file("package/package.json", PLAIN)
        + file("package/evil", b"", b"2", linkname="../../../../etc/passwd")
        + file("package/hard", b"", b"1", linkname="/etc/passwd")
        + file("package/node_modules/x/package.json", b"", b"2", linkname="/etc/hook.json")
        + END), None),
    "gypfile-false-binding-gyp": lambda: (build_tarball({
        "package.json": manifest(gypfile=False), "binding.gyp": b"{'targets': []}"}), None),
    "path-spellings": lambda: (_gz(b"".join(file(path, b"1") for path in (
        "./package/a.js", "/b.js", "package//c.js", "package/./d.js", "package",
        "x/e.js")) + file("package/f/", b"") + file("package/package.json", PLAIN) + END), None),
    "gitignore": lambda: (_gz(b"".join(file(path, b"1") for path in (
        "package/.gitignore", "package/sub/.npmignore", "package/sub/.gitignore"))
        + file("package/package.json", PLAIN) + END), None),
    "two-root-package-jsons": lambda: (_gz(file("package/package.json", PLAIN)
                                           + file("package/package.json", HOOK) + END), None),
    "dot-dot": lambda: (_gz(file("package/../package.json", HOOK) + END), "'..'"),
    "windows-root": lambda: (_gz(file("package/C:x.js", b"1") + END), "Windows"),
    "bad-checksum": lambda: (_gz(header("package/README", 1024, checksum_delta=1)
                                 + file("package/package.json", HOOK) + END), "checksum"),
    "folder-with-data": lambda: (_gz(header("package/lib/", 512)
                                     + file("package/package.json", HOOK) + END), "folder"),
    "entry-after-the-end": lambda: (_gz(file("package/package.json", PLAIN) + END
                                        + file("package/node_modules/y/package.json", HOOK)
                                        + END), "end-of-archive"),
    "file-and-folder": lambda: (_gz(file("package/a", b"1") + file("package/a/b", b"2") + END),
                                "both a file and a folder"),
    # the folder of the file before is not walked again: one named as a file after its files
    "folder-then-file": lambda: (_gz(file("package/lib/a.js", b"1") + file("package/lib/b.js", b"2")
                                     + file("package/lib", b"3") + END),
                                 "both a file and a folder"),
    "too-deep": lambda: (_deep(), "deep"),
}


def _symlink(path: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(path)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info, b""


@dataclass
class Reading:
    """What mirrorgate's reader makes of one tarball."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    problem: str | None = None


class _Listing:
    def __init__(self, reading: Reading) -> None:
        self.reading = reading

    def entry(self, entry: Entry) -> int:
        if not entry.size:
            self.data(entry, b"")
        return entry.size

    def data(self, entry: Entry, data: bytes) -> None:
        if entry.kind in NODE_EMITS:
            self.reading.entries.append({
                "type": entry.kind, "path": entry.path, "linkpath": entry.linkpath,
                "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        if entry.placed is not None:
            self.reading.files[entry.placed] = data


def read(tarball: bytes, step: int = 4096) -> Reading:
    reading = Reading()
    reader = TarballReader(_Listing(reading))
    for start in range(0, len(tarball), step):
        reader.feed(tarball[start:start + step])
    reader.finish()
    reading.problem = reader.problem
    return reading


def _pack(name: str, workdir: Path, out: Path) -> Path:
    """The sample project packed by client `name` (its own pack command)."""
    packer = client("pnpm" if name == "pnpm8" else name, workdir)
    project = packer.project
    bundled = name != "yarn1"  # yarn 1's pack fails on bundleDependencies
    document: dict[str, Any] = {
        "name": "packed-sample", "version": "1.2.3", "license": "MIT", "main": "index.js",
        "bin": {"packed": "cli.js"}, "scripts": {"test": "node t.js"}}
    if bundled:
        document |= {"dependencies": {"dep": "1.0.0"}, "bundleDependencies": ["dep"]}
        (project / "node_modules" / "dep").mkdir(parents=True)
        (project / "node_modules" / "dep" / "package.json").write_text(
            '{"name": "dep", "version": "1.0.0", "scripts": {"postinstall": "node x.js"}}')
        (project / "node_modules" / "dep" / "index.js").write_text("module.exports = 1\n")
    (project / "package.json").write_text(json.dumps(document, indent=2) + "\n")
    (project / "index.js").write_text("module.exports = require('./lib')\n")
    (project / "cli.js").write_text("#!/usr/bin/env node\nrequire('.')\n")
    (project / "ünïcode-ç.js").write_text("// ✓\n")
    (project / "empty.txt").write_text("")
    (project / "blob.bin").write_bytes(hashlib.sha512(b"seed").digest() * 2000)  # 128 KB
    deep = project / "lib" / ("d" * 60) / ("e" * 60)  # past ustar's 100-byte name field
    deep.mkdir(parents=True)
    (deep / ("f" * 40 + ".js")).write_text("exports.deep = true\n")
    (project / "lib" / "index.js").write_text("exports.x = 1\n")
    (project / "yarn.lock").touch()
    (project / "pnpm-workspace.yaml").write_text("nodeLinker: hoisted\n")  # for bundled deps
    target = out / f"{name}.tgz"
    commands = {
        "npm": ["pack", f"--pack-destination={out / 'npm'}", f"--cache={packer.cache}"],
        "pnpm": ["pack", f"--pack-destination={out / 'pnpm'}"],
        "pnpm8": ["pack", f"--pack-destination={out / 'pnpm8'}"],
        "yarn1": ["pack", f"--filename={target}"],
        "yarn4": ["pack", f"--out={target}"],
        "bun": ["pm", "pack", f"--destination={out / 'bun'}"],
    }
    (out / name).mkdir(exist_ok=True)
    if name == "pnpm8":  # pnpm 8, kept beside the current pnpm for the lockfile tests
        node = shutil.which("node")
        assert node is not None
        pnpm8 = CLIENTS_DIR / "node_modules" / "pnpm8" / "bin" / "pnpm.cjs"
        done = subprocess.run([node, str(pnpm8), *commands[name]], cwd=project,
                              env=packer.environment(),
                              capture_output=True, text=True, timeout=120, check=False)
    else:
        done = packer.run(*commands[name])
    assert done.returncode == 0, f"{name} pack failed: {done.stdout}\n{done.stderr}"
    if not target.exists():
        [packed] = (out / name).glob("*.tgz")
        packed.rename(target)
    return target


@dataclass
class Corpus:
    files: dict[str, Path]
    expected: dict[str, str | None]
    node: dict[str, Any]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    base = tmp_path_factory.mktemp("corpus")
    files: dict[str, Path] = {}
    expected: dict[str, str | None] = {}
    for name in REGISTRY:
        files[name], expected[name] = FIXTURES / name, None
    for name in PACKERS:
        files[name] = _pack(name, base / f"work-{name}", base)
        expected[name] = None
    for name, build in HOSTILE.items():
        data, refusal = build()
        files[name] = base / f"{name}.tgz"
        files[name].write_bytes(data)
        expected[name] = refusal
    # node 20's zlib has no zstd (node-tar detects it and fails there; on Node 22.15+ it
    # extracts it): npm's view of the zstd tarball is its view of the same tar uncompressed
    zstd = files["zstd-bundled-postinstall"]
    plain = base / "zstd-as-tar.tar"
    plain.write_bytes(zstandard.ZstdDecompressor().decompressobj().decompress(zstd.read_bytes()))
    root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, check=True)
    script = Path(__file__).parent / "nodetar.js"
    for_node = {name: plain if path == zstd else path for name, path in files.items()}
    listed = subprocess.run(["node", str(script), root.stdout.strip(),
                             *map(str, for_node.values())],
                            capture_output=True, text=True, check=False, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    node = json.loads(listed.stdout)
    by_name = {name: node[str(path)] for name, path in for_node.items()}
    return Corpus(files, expected, by_name)


def _manifest_as_npm(data: bytes) -> dict[str, Any]:
    try:
        return {"value": parse_package_json(data)}
    except PackageJsonError:
        return {"error": True}


def _node_manifest(found: dict[str, Any]) -> dict[str, Any]:
    return {"value": json.loads(found["value"])} if "value" in found else {"error": True}


CASES = [*REGISTRY, *PACKERS, *HOSTILE]


@pytest.mark.parametrize("name", CASES)
def test_mirrorgate_reads_each_tarball_as_npm_does_or_refuses_it_with_a_reason(
        corpus: Corpus, name: str) -> None:
    tarball = corpus.files[name].read_bytes()
    mine = read(tarball)
    theirs = corpus.node[name]
    refusal = corpus.expected[name]
    if refusal is not None:
        assert mine.problem is not None
        assert refusal in mine.problem, mine.problem
        return
    assert mine.problem is None, mine.problem
    # node-tar's Parser: the same entries, in order, with the same bytes
    assert mine.entries == theirs["parsed"]["entries"]
    # pacote's extraction: the same files with the same bytes, nothing else
    assert theirs["extracted"]["error"] is None
    assert {path: hashlib.sha256(data).hexdigest() for path, data in mine.files.items()} \
        == theirs["extracted"]["files"]
    # each package.json as @npmcli/package-json parses it
    manifests = {path: _manifest_as_npm(data) for path, data in mine.files.items()
                 if path.rsplit("/", 1)[-1] == "package.json"}
    assert manifests == {path: _node_manifest(found)
                         for path, found in theirs["extracted"]["manifests"].items()}
    assert read(tarball, step=1).entries == mine.entries  # however the bytes arrive


def test_the_corpus_holds_every_packer_and_the_old_npm_pax_shape(corpus: Corpus) -> None:
    assert len(REGISTRY) >= 20
    old_npm = [name for name in REGISTRY
               if b"NODETAR" in gzip.decompress(corpus.files[name].read_bytes())]
    assert {"statuses-1.5.0.tgz", "tmp-0.0.33.tgz", "brorand-1.1.0.tgz"} <= set(old_npm)
    packed = {name: read(corpus.files[name].read_bytes()).files for name in PACKERS}
    for name, files in packed.items():
        assert "package.json" in files, name
        assert "lib/index.js" in files, name
        assert any(len(path) > 100 for path in files), name  # the long path survived
        if name not in ("yarn1", "yarn4"):  # neither packs bundled dependencies
            assert "node_modules/dep/package.json" in files, name


def test_a_tarball_in_one_byte_pieces_reads_as_in_one_piece() -> None:
    tarball = (FIXTURES / "statuses-1.5.0.tgz").read_bytes()
    whole = read(tarball, step=len(tarball))
    assert whole.problem is None
    assert "package.json" in whole.files
    assert read(tarball, step=1).files == whole.files


def _mutants(count: int, seed: int) -> list[bytes]:
    """Real registry tars (uncompressed) with one to four header or pax bytes changed, most
    with their checksums made right again: the near-misses a hostile packer would try."""
    rng = random.Random(seed)
    bases = [gzip.decompress((FIXTURES / name).read_bytes()) for name in REGISTRY]
    mutants = []
    for _ in range(count):
        tarball = bytearray(rng.choice(bases))
        blocks = min(len(tarball) // 512, 12)
        for _ in range(rng.randint(1, 4)):
            at = 512 * rng.randrange(blocks) + rng.choice([
                rng.randrange(512), 124 + rng.randrange(12), 156, 157 + rng.randrange(5),
                rng.randrange(100), 345 + rng.randrange(10), 148 + rng.randrange(8)])
            tarball[at] = rng.choice([0, 0x20, 0x30 + rng.randrange(8), ord("/"), ord("."),
                                      0x80, 0xFF, rng.randrange(256), ord("\n"), ord("\\"),
                                      ord("x"), ord("g"), ord("L"), ord("5"), ord("2")])
        if rng.random() < 0.8:
            for start in range(0, 512 * blocks, 512):
                block = tarball[start:start + 512]
                if block.count(0) != 512:
                    block[148:156] = b" " * 8
                    block[148:156] = b"%06o\0 " % (sum(block) & 0o777777)
                    tarball[start:start + 512] = block
        mutants.append(bytes(tarball))
    return mutants


def test_mutated_registry_tarballs_read_as_npm_does_or_are_refused(tmp_path: Path) -> None:
    files = []
    for index, mutant in enumerate(_mutants(300, seed=41)):
        files.append(tmp_path / f"mutant-{index}.tar")
        files[-1].write_bytes(mutant)
    root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, check=True)
    listed = subprocess.run(["node", str(Path(__file__).parent / "nodetar.js"),
                             root.stdout.strip(), *map(str, files)],
                            capture_output=True, text=True, check=False, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    node = json.loads(listed.stdout)
    outcomes = {"equal": 0, "refused": 0}
    for path in files:
        mine, theirs = read(path.read_bytes()), node[str(path)]
        if mine.problem is not None:
            outcomes["refused"] += 1
            continue
        assert mine.entries == theirs["parsed"]["entries"], path.name
        assert theirs["extracted"]["error"] is None, path.name
        assert {name: hashlib.sha256(data).hexdigest() for name, data in mine.files.items()} \
            == theirs["extracted"]["files"], path.name
        outcomes["equal"] += 1
    assert outcomes["equal"] > 150  # most near-misses are still tarballs npm reads
