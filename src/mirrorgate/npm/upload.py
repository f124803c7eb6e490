"""A client's publish document read as it streams: the attachment hashed, the rest kept small.

`npm publish` sends one JSON document with the tarball in base64 (`_attachments.<file>.data`);
the attachment is decoded and hashed (sha512 and sha1) as it passes and never kept, so a
100 MiB publish costs a bounded buffer, and the checks see what the registry will store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.integrity import Digest, parse_integrity, parse_shasum, same_digest
from mirrorgate.npm.mirrormark import MARK_FIELD
from mirrorgate.npm.names import PackageName, tarball_filename
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS
from mirrorgate.npm.tarscripts import ScriptScan
from mirrorgate.npm.versions import is_version_string, parse_version, unstorable

__all__ = ["FORGED_MARK", "Published", "ScannedUpload", "UploadError", "UploadScan",
           "checked_publish"]

_STRUCTURE = re.compile(rb'["{}\[\]:,]')
_STRING_END = re.compile(rb'["\\]')
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]")
_KEY_LIMIT = 512
"""Bytes of a key remembered; longer keys are never one the scan looks for."""
_MAX_DEPTH = 1024
_ONE_TARBALL = ("the publish document must carry exactly one tarball in _attachments, as npm "
                "publish sends it")
_ATTACHMENTS = b"_attachments"
_DATA = b"data"


class UploadError(MirrorgateError, ValueError):
    """A publish document that cannot be accepted; the message says what is wrong. `reason`
    names the refusals a security team hears of (`FORGED_MARK`), with the `version` asked for."""

    def __init__(self, message: str, *, reason: str | None = None,
                 version: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.version = version


FORGED_MARK = "forged-mark"
"""A client's publish carrying the mirror mark: refused, and a security event."""


@dataclass(frozen=True, slots=True)
class ScannedUpload:
    """What a finished scan found: the parsed skeleton (the attachment string emptied), how
    many strings stood where the attachment goes, and the attachment's bytes described."""

    document: dict[str, Any]
    attachment_strings: int
    attachment_bytes: int
    sha512: bytes
    sha1: bytes


class UploadScan:
    """Feed `feed()` the body's chunks in order, then call `finish()`.

    The scan only finds the attachment string and keeps the rest (the skeleton: the document
    with that string emptied); orjson then parses the skeleton and is the authority on what
    the document says. orjson and Node's JSON.parse both keep the last of duplicate keys, so
    any disagreement about where the attachment was (an escaped key, a duplicate
    `_attachments`, two `data` strings) leaves a skeleton whose attachment is not the emptied
    one: refused, never guessed. The attachment must be plain, padded base64 (no escapes, no
    whitespace), so Node's lenient decoder and Python's strict one read the same bytes.
    Structure deeper than the attachment's path is skipped by bracket counting, and the
    skeleton is bounded (`max_skeleton`), so memory is bounded whatever is sent.
    """

    def __init__(self, *, max_skeleton: int, keep_tarball: bool = False) -> None:
        """`keep_tarball`: hold the decoded bytes until `drain_tarball()` takes them (for a
        store that writes the tarball itself rather than forwarding the document)."""
        self.max_skeleton = max_skeleton
        self._keep_tarball = keep_tarball
        self._decoded = bytearray()
        self._skeleton = bytearray()
        self._kinds: list[int] = []  # ord("{") or ord("[") per open container
        self._keys: list[bytes | None] = []  # the current key of each open object
        self._expect_key = False
        self._in_string = False
        self._escaped = False
        self._string_is_key = False
        self._key = bytearray()
        self._in_data = False
        self._data_strings = 0
        self._padded = False
        self._pending = b""  # base64 characters not yet a whole 4-character group
        self._size = 0
        self._sha512 = hashlib.sha512()
        self._sha1 = hashlib.sha1()  # noqa: S324 - npm's shasum, checked, not trusted alone

    # --- feeding ---------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        position, end = 0, len(chunk)
        while position < end:
            if self._in_data:
                position = self._data(chunk, position)
            elif self._in_string:
                position = self._string(chunk, position)
            else:
                position = self._structure(chunk, position)

    def _keep(self, part: bytes) -> None:
        self._skeleton += part
        if len(self._skeleton) > self.max_skeleton:
            raise UploadError(f"the publish document without its tarball is larger than "
                              f"{self.max_skeleton} bytes (MIRRORGATE_MAX_METADATA_BYTES)")

    def _structure(self, chunk: bytes, position: int) -> int:
        match = _STRUCTURE.search(chunk, position)
        if match is None:
            self._keep(chunk[position:])
            return len(chunk)
        at = match.start()
        self._keep(chunk[position:at + 1])
        char = chunk[at]
        if char == 0x22:  # a string opens
            self._string_is_key = self._expect_key
            self._expect_key = False
            if self._string_is_key:
                self._key.clear()
            elif self._at_data():
                if self._data_strings:
                    raise UploadError(_ONE_TARBALL)
                self._in_data = True
                self._data_strings += 1
                return at + 1
            self._in_string = True
        elif char in (0x7B, 0x5B):  # { [
            if len(self._kinds) >= _MAX_DEPTH:
                raise UploadError(f"the publish document nests deeper than {_MAX_DEPTH} levels")
            self._kinds.append(char)
            self._keys.append(None)
            self._expect_key = char == 0x7B
        elif char in (0x7D, 0x5D):  # } ]
            if self._kinds:
                self._kinds.pop()
                self._keys.pop()
            self._expect_key = False
        elif char == 0x2C:  # , : the next string of an object is a key
            self._expect_key = bool(self._kinds) and self._kinds[-1] == 0x7B
        return at + 1

    def _at_data(self) -> bool:
        """Whether a value string opening now is `_attachments.<file>.data` of the top level."""
        return (len(self._kinds) == 3 and self._kinds == [0x7B, 0x7B, 0x7B]
                and self._keys[0] == _ATTACHMENTS and self._keys[2] == _DATA)

    def _string(self, chunk: bytes, position: int) -> int:
        if self._escaped:  # the escaped character is the first of this chunk
            self._escaped = False
            self._keep(chunk[position:position + 1])
            self._remember_key(chunk[position:position + 1])
            return position + 1
        match = _STRING_END.search(chunk, position)
        if match is None:
            self._keep(chunk[position:])
            self._remember_key(chunk[position:])
            return len(chunk)
        at = match.start()
        self._keep(chunk[position:at + 1])
        if chunk[at] == 0x5C:  # a backslash: the next character is escaped, maybe a quote
            self._remember_key(chunk[position:at + 1])
            self._escaped = True
            return at + 1
        self._remember_key(chunk[position:at])
        self._in_string = False
        if self._string_is_key and self._keys:
            # an escaped key is remembered raw, so it never equals a key the scan looks for;
            # orjson then reads it decoded, and the checks refuse what the scan missed
            self._keys[-1] = bytes(self._key) if len(self._key) <= _KEY_LIMIT else None
        return at + 1

    def _remember_key(self, part: bytes) -> None:
        if self._string_is_key and len(self._key) <= _KEY_LIMIT:
            self._key += part[:_KEY_LIMIT + 1]

    def _data(self, chunk: bytes, position: int) -> int:
        close = chunk.find(b'"', position)
        stop = len(chunk) if close < 0 else close
        part = chunk[position:stop]
        bad = _NOT_BASE64.search(part)
        if bad is not None:
            raise UploadError("the tarball in _attachments is not plain base64 (found "
                              f"{chr(part[bad.start()])!r}); npm sends it unescaped, without "
                              "whitespace")
        self._decode(part)
        if close < 0:
            return len(chunk)
        if self._pending:
            raise UploadError("the tarball in _attachments is not padded base64 (its length "
                              "is not a multiple of 4)")
        self._in_data = False
        self._keep(b'"')  # the skeleton holds the emptied string: ""
        return close + 1

    def _decode(self, part: bytes) -> None:
        if not part:
            return
        if self._padded:
            raise UploadError("the tarball in _attachments continues after its base64 padding")
        text = self._pending + part
        whole = len(text) - len(text) % 4
        groups, self._pending = text[:whole], text[whole:]
        if not groups:
            return
        if b"=" in groups:
            self._padded = True
            if self._pending:
                raise UploadError("the tarball in _attachments continues after its base64 "
                                  "padding")
        try:
            decoded = binascii.a2b_base64(groups, strict_mode=True)
        except binascii.Error as error:
            raise UploadError(f"the tarball in _attachments is not valid base64 ({error})") \
                from None
        self._size += len(decoded)
        self._sha512.update(decoded)
        self._sha1.update(decoded)
        if self._keep_tarball:
            self._decoded += decoded

    # --- finishing -------------------------------------------------------------------------

    def drain_tarball(self) -> bytes:
        """The tarball bytes decoded since the last call (with `keep_tarball`)."""
        taken, self._decoded = bytes(self._decoded), bytearray()
        return taken

    @property
    def attachment_bytes(self) -> int:
        """Bytes of the tarball decoded so far."""
        return self._size

    @property
    def attachment_seen(self) -> bool:
        """Whether an attachment string has begun (so the body is a publish, not a change)."""
        return self._data_strings > 0

    def finish(self) -> ScannedUpload:
        """The scan's result once the body has ended; raises UploadError when the document
        is not a JSON object."""
        if self._in_data or self._in_string:
            raise UploadError("the publish document ends inside a string")
        try:
            document = orjson.loads(self._skeleton)
        except orjson.JSONDecodeError as error:
            raise UploadError(f"the publish document is not valid JSON ({str(error)[:120]})") \
                from None
        if not isinstance(document, dict):
            raise UploadError("the publish document is not a JSON object")
        return ScannedUpload(document, self._data_strings, self._size, self._sha512.digest(),
                             self._sha1.digest())


@dataclass(frozen=True, slots=True)
class Published:
    """The one version a checked publish document adds."""

    version: str
    filename: str
    tags: dict[str, str]


def _plain_version(version: str) -> bool:
    """A version as npm writes it in a publish: strict semver (`parse_version` alone also
    takes a leading `v`), within the grammar every other module holds versions to."""
    return version[:1].isdigit() and is_version_string(version) \
        and parse_version(version) is not None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def checked_publish(name: PackageName, scanned: ScannedUpload,
                    contents: ScriptScan | None = None) -> Published:
    """The version `scanned` publishes, once the document names `name`, holds one version and
    one tarball, that tarball's bytes are the ones its `dist` declares and (with `contents`,
    the tarball read) its own package.json says what the document says; raises UploadError
    saying what is wrong otherwise."""
    document = scanned.document
    attachments = document.get("_attachments")
    if scanned.attachment_strings != 1 or not isinstance(attachments, dict) \
            or len(attachments) != 1:
        raise UploadError(_ONE_TARBALL)
    [(filename, attachment)] = attachments.items()
    if not isinstance(attachment, dict) or attachment.get("data") != "":
        raise UploadError("the tarball in _attachments is not where mirrorgate read it (an "
                          "escaped or repeated key); send the document npm publish sends")
    for field in ("name", "_id"):
        if field in document and document[field] != name.full:
            raise UploadError(f"the document's {field} {str(document[field])[:100]!r} is not "
                              f"{name.full}, the package the URL names")
    versions = document.get("versions")
    if not isinstance(versions, dict) or len(versions) != 1:
        raise UploadError("the publish document must hold exactly one version")
    [(version, manifest)] = versions.items()
    if not isinstance(manifest, dict):
        raise UploadError(f"the manifest of {version[:100]!r} is not a JSON object")
    if manifest.get("name") != name.full:
        raise UploadError(f"the manifest names {str(manifest.get('name'))[:100]!r}, not "
                          f"{name.full}, the package the URL names")
    if MARK_FIELD in manifest:
        # The mark says "the worker mirrored this from public"; a client's build carrying one
        # would stop counting as first-party, and the name would then take public versions
        # (an impostor's) merged in. Only the worker writes it, straight to the registry.
        raise UploadError(f"the manifest carries {MARK_FIELD}, the mark mirrorgate writes on "
                          "versions it mirrored from public; remove it from package.json",
                          reason=FORGED_MARK, version=version[:100])
    if manifest.get("version") != version or not _plain_version(version):
        raise UploadError(f"{version[:100]!r} is not a semver version, or not the one its "
                          "manifest declares")
    if (why := unstorable(version)) is not None:
        raise UploadError(f"{why}; publish {version.partition('+')[0]} instead")
    # npm names it `@scope/name-1.0.0.tgz`; registries store it under the last segment
    if filename not in (f"{name.full}-{version}.tgz", tarball_filename(name, version)):
        raise UploadError(f"the attachment is named {filename[:100]!r}; for {name.full}@"
                          f"{version} npm names it {name.full}-{version}.tgz")
    length = attachment.get("length")
    if length is not None and length != scanned.attachment_bytes:
        raise UploadError(f"the attachment declares {str(length)[:30]} bytes but holds "
                          f"{scanned.attachment_bytes}")
    _check_digests(name, version, manifest.get("dist"), scanned)
    if contents is not None:
        _check_contents(name, version, manifest, contents)
    tags = document.get("dist-tags", {})
    if not isinstance(tags, dict) or any(not isinstance(tag, str) or value != version
                                         for tag, value in tags.items()):
        raise UploadError(f"the document's dist-tags may only name {version}, the version it "
                          "publishes")
    return Published(version, filename, tags)


_DEPENDENCY_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies")


def _check_contents(name: PackageName, version: str, manifest: dict[str, Any],
                    contents: ScriptScan) -> None:
    """Manifest confusion on the publish path: the registry serves the document's manifest,
    a client runs the tarball's own package.json. They must name the same package and
    version, run the same install scripts and depend on the same packages, and no entry may
    land outside `package/`."""
    contents.finish()
    where = f"{name.full}@{version}"
    if contents.problem is not None:
        raise UploadError(f"the tarball of {where} cannot be read: {contents.problem}")
    if contents.escapes:
        raise UploadError(f"the tarball of {where} has entries that land outside package/ "
                          f"({', '.join(map(repr, contents.escapes[:5]))}); npm pack never "
                          "writes one")
    inner = contents.manifest
    if inner is None:
        raise UploadError(f"the tarball of {where} holds no package/package.json")
    said = f"{str(inner.get('name'))[:100]}@{str(inner.get('version'))[:100]}"
    if inner.get("name") != name.full or inner.get("version") != version:
        raise UploadError(f"the tarball's package.json is {said}, not {where}, which the "
                          "document publishes")
    # npm publish's `gypfile` step (@npmcli/package-json normalize.js): `if (!scripts.install
    # && !scripts.preinstall && data.gypfile !== false)` and a `*.gyp` file is there,
    # `scripts.install = 'node-gyp rebuild'` goes into the document, not the tarball
    gyp = "" in contents.gyp_any and "" not in contents.gypfile_off
    for key in INSTALL_SCRIPT_KEYS:
        theirs, ours = _script(inner, key), _script(manifest, key)
        # npm declares node-gyp's implicit install for a binding.gyp without an install script
        if key == "install" and theirs is None and gyp and ours == "node-gyp rebuild":
            continue
        if theirs != ours:
            raise UploadError(f"the tarball's package.json runs {key} {theirs!r:.100} at "
                              f"install, and the document declares {ours!r:.100}: what the "
                              "registry shows must be what a client runs")
    for field in _DEPENDENCY_FIELDS:
        theirs_deps, ours_deps = _mapping(inner.get(field)), _mapping(manifest.get(field))
        if field == "dependencies":
            # npm publishes optionalDependencies inside dependencies too
            if ours_deps not in (theirs_deps, {**_mapping(inner.get("optionalDependencies")),
                                               **theirs_deps}):
                raise UploadError(_dependencies_differ(where, field, theirs_deps, ours_deps))
        elif theirs_deps != ours_deps:
            raise UploadError(_dependencies_differ(where, field, theirs_deps, ours_deps))


def _script(manifest: Mapping[str, Any], key: str) -> str | None:
    scripts = manifest.get("scripts")
    value = scripts.get(key) if isinstance(scripts, Mapping) else None
    return value if isinstance(value, str) and value else None


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _dependencies_differ(where: str, field: str, theirs: Mapping[str, Any],
                         ours: Mapping[str, Any]) -> str:
    differ = sorted(set(theirs) ^ set(ours) | {k for k in theirs if theirs.get(k) != ours.get(k)})
    shown = ", ".join(name[:60] for name in differ[:5])
    return (f"the tarball's package.json and the document of {where} differ in {field} "
            f"({shown}): what the registry shows must be what a client installs")


def _check_digests(name: PackageName, version: str, dist: object,
                   scanned: ScannedUpload) -> None:
    """Every digest `dist` declares must be the bytes'; sha512 integrity and shasum required."""
    where = f"{name.full}@{version}"
    if not isinstance(dist, dict):
        raise UploadError(f"{where} has no dist; npm publish declares the tarball's integrity "
                          "and shasum there")
    integrity, shasum = _text(dist.get("integrity")), _text(dist.get("shasum"))
    declared = parse_integrity(integrity) if integrity is not None else ()
    if not any(digest.algorithm == "sha512" for digest in declared):
        raise UploadError(f"{where} declares no sha512 dist.integrity; npm publish always "
                          "does, and mirrorgate checks it against the tarball")
    sha1 = parse_shasum(shasum) if shasum is not None else None
    if sha1 is None:
        raise UploadError(f"{where} declares no dist.shasum (a hex sha1)")
    computed = {algorithm: Digest(algorithm, base64.b64encode(raw).decode("ascii"))
                for algorithm, raw in (("sha512", scanned.sha512), ("sha1", scanned.sha1))}
    for digest in (*declared, sha1):
        actual = computed.get(digest.algorithm)
        if actual is None:
            raise UploadError(f"{where} declares {digest.algorithm} integrity; mirrorgate "
                              "checks sha512 and sha1 (what npm publish declares)")
        if not same_digest(digest, actual):
            raise UploadError(f"the tarball of {where} does not match its declared "
                              f"{digest.algorithm} (its bytes hash to {digest.algorithm}-"
                              f"{actual.value}); nothing was published")
