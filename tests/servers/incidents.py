"""The compromises of 2025-26 rebuilt as fixture packages, from their public descriptions: the
shapes the release signals are meant to stop, with no malware in them.

- **Shai-Hulud** (September and November 2025): a patch release adds a `postinstall` that runs a
  new, large, minified `bundle.js`; the versions before ran nothing at install.
- **chalk/debug** (September 2025): a patch release carries an obfuscated blob (javascript-
  obfuscator's style: `_0x` identifiers, a hex-escaped string array, one long line) injected
  into the package's existing entry file; no new script.
- **axios** (1.14.1 and 0.30.4, March 2026): a release adds one new dependency,
  `plain-crypto-js`, whose version was published the day before and has a `postinstall`.

Every "payload" here only prints a line, and the tests install with scripts off.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from tests.servers.packages import (
    EPOCH,
    FixturePackage,
    FixtureVersion,
    make_package,
    make_version,
)

__all__ = [
    "AXIOS_DEPENDENCY",
    "axios_shape",
    "chalk_shape",
    "entry_file",
    "follow_redirects",
    "minified_bundle",
    "obfuscated_blob",
    "previous_of",
    "shai_hulud_shape",
]

AXIOS_DEPENDENCY = "plain-crypto-js"


def _fresh(age: timedelta = timedelta(minutes=5)) -> datetime:
    return datetime.now(UTC) - age


def entry_file(name: str) -> bytes:
    """A hand-written entry file, as a small utility package ships it (short lines)."""
    lines = ["'use strict';", f"// {name}: a fixture utility", ""]
    for index in range(60):
        lines += [f"function helper{index}(value) {{",
                  f"  return typeof value === 'string' ? value.trim() + '{index}' : value;",
                  "}", f"exports.helper{index} = helper{index};", ""]
    return "\n".join(lines).encode()


def minified_bundle(size: int) -> bytes:
    """About `size` bytes of minified JavaScript on one line, as a bundler writes it: long
    lines and short names, none of an obfuscator's marks. It prints a line when run."""
    parts = ["!function(){\"use strict\";"]
    index = 0
    total = len(parts[0])
    while total < size:
        part = f"var a{index}=function(b,c){{return(b+c*{index % 97})|0}};"
        parts.append(part)
        total += len(part)
        index += 1
    parts.append("console.log(\"fixture bundle ran\")}();\n")
    return "".join(parts).encode()


def obfuscated_blob(seed: str) -> bytes:
    """One line in javascript-obfuscator's style: a hex-escaped string array rotated by a
    self-invoking function, every identifier `_0x` and hex. Harmless: it logs a word."""
    words = [hashlib.sha256(f"{seed}{i}".encode()).hexdigest()[:12] for i in range(400)]
    escaped = ",".join("'" + "".join(f"\\x{ord(ch):02x}" for ch in word) + "'"
                       for word in words)
    ids = [f"_0x{hashlib.sha256(f'{seed}id{i}'.encode()).hexdigest()[:4]}" for i in range(60)]
    body = ";".join(f"const {ident}=function({ids[(i + 1) % 60]}){{return "
                    f"{ids[(i + 2) % 60]}[{ids[(i + 1) % 60]}-0x{i:x}]}}"
                    for i, ident in enumerate(ids))
    return (f"const _0x5a1f=[{escaped}];(function(_0x2b3c,_0x4d5e){{const _0x6f70=function("
            f"_0x8192){{while(--_0x8192){{_0x2b3c['push'](_0x2b3c['shift']())}}}};_0x6f70(++"
            f"_0x4d5e)}}(_0x5a1f,0x1f4));{{{body}}};console['log'](_0x5a1f[0x0]);\n").encode()


def shai_hulud_shape(name: str = "worm-host") -> FixturePackage:
    """1.4.2 runs nothing at install; 1.4.3, just published, runs `node bundle.js`, a new
    minified bundle of about 1.5 MB."""
    files = {"index.js": entry_file(name), "README.md": b"# worm host\n"}
    before = make_version(name, "1.4.2", files=files, published=EPOCH)
    after = make_version(name, "1.4.3", files={**files, "bundle.js": minified_bundle(1_500_000)},
                         published=_fresh(), scripts={"postinstall": "node bundle.js"})
    return make_package(name, [make_version(name, "1.4.1", files=files,
                                            published=EPOCH - timedelta(days=30)),
                               before, after])


def chalk_shape(name: str = "colour-kit") -> FixturePackage:
    """5.6.0's entry file is hand-written; 5.6.1, just published, has an obfuscated blob
    appended to the same file."""
    before = make_version(name, "5.6.0", files={"index.js": entry_file(name)}, published=EPOCH)
    after = make_version(name, "5.6.1",
                         files={"index.js": entry_file(name) + obfuscated_blob(name)},
                         published=_fresh())
    return make_package(name, [before, after])


def axios_shape(name: str = "http-kit") -> tuple[FixturePackage, FixturePackage]:
    """1.14.0 depends on `follow-redirects` alone; 1.14.1, just published, adds
    `plain-crypto-js`, whose only version was published the day before with a
    `postinstall`. Returns (the package, its new dependency); `follow-redirects` is one of
    the packages too (`axios_shape_dependencies`)."""
    files = {"index.js": entry_file(name)}
    before = make_version(name, "1.14.0", {"follow-redirects": "^1.15.0"}, files=files,
                          published=EPOCH)
    after = make_version(name, "1.14.1", {"follow-redirects": "^1.15.0",
                                          AXIOS_DEPENDENCY: "^4.2.1"},
                         files=files, published=_fresh())
    dropper = make_version(AXIOS_DEPENDENCY, "4.2.1",
                           files={"index.js": b"module.exports = {};\n",
                                  "setup.js": b"console.log('fixture dropper ran');\n"},
                           published=_fresh(timedelta(days=1)),
                           scripts={"postinstall": "node setup.js"},
                           # published from an account of its own, not the package's
                           maintainers=[{"name": "crypto-dev", "email": "dev@example.com"}],
                           _npmUser={"name": "crypto-dev", "email": "dev@example.com"})
    dependency = make_package(AXIOS_DEPENDENCY, [dropper])
    dependency.fields["maintainers"] = [{"name": "crypto-dev", "email": "dev@example.com"}]
    return make_package(name, [before, after]), dependency


def follow_redirects() -> FixturePackage:
    """The dependency both axios-shaped versions share (old, harmless)."""
    return make_package("follow-redirects", [make_version("follow-redirects", "1.15.6",
                                                          published=EPOCH)])


def previous_of(package: FixturePackage) -> FixtureVersion:
    """The version before the incident's (the one the signals compare with)."""
    order = package.sorted_versions()
    return package.versions[order[-2]]
