"""A packument read lazily: its fields, and each of its versions, parsed only when read.

A tarball request needs one version of a packument that may list thousands (20 MB). msgspec
finds where each value's bytes lie (`Raw`) in one pass, at an eighth of a whole parse's cost;
orjson parses the values read, exactly as it parses them in a whole document. docs/serving.md
("The cold path at scale") has the measurements and the one departure (`lazy_packument`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import orjson

__all__ = ["LazyMapping", "lazy_packument", "objects", "reduced"]

_ABSENT = msgspec.Raw()
"""A field's value when the object lacks it: empty, which no JSON value is (msgspec takes no
union of `Raw` with anything, None included)."""


class _OneVersion(msgspec.Struct):
    """A packument as the gate reads it to judge one version (`gate(..., only=)`), in one
    pass: where each version lies, the other fields it reads as `Raw`, and every other field
    (the head: readme, description..., left out of such a gating) skipped unbuilt. A key given
    twice is read from its last copy, as orjson reads it."""

    versions: dict[str, msgspec.Raw] | None = None
    name: msgspec.Raw = _ABSENT
    time: msgspec.Raw = _ABSENT
    tags: msgspec.Raw = msgspec.field(default=_ABSENT, name="dist-tags")


_ONE_VERSION = msgspec.json.Decoder(_OneVersion)


@functools.cache
def _fields_decoder(fields: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """A decoder keeping `fields` of a JSON object (each as `Raw`, empty when absent) and
    skipping the rest without building it."""
    struct = msgspec.defstruct("Fields", [(f"f{at}", msgspec.Raw, _ABSENT)
                                          for at in range(len(fields))],
                               rename={f"f{at}": field for at, field in enumerate(fields)})
    return msgspec.json.Decoder(struct)


class LazyMapping(Mapping[str, Any]):
    """A JSON object whose values are parsed when first read (and kept); `parsed` holds those
    read another way already (a packument's `versions`, itself a `LazyMapping`). With
    `fields`, each value that is an object is read with only those fields (`reduced`)."""

    __slots__ = ("_fields", "_parsed", "_raw")

    def __init__(self, raw: dict[str, msgspec.Raw], parsed: dict[str, Any] | None = None,
                 fields: tuple[str, ...] | None = None) -> None:
        self._raw = raw
        self._parsed: dict[str, Any] = parsed if parsed is not None else {}
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        try:
            return self._parsed[key]
        except KeyError:
            pass
        view = memoryview(self._raw[key])
        value = orjson.loads(view) if self._fields is None else _kept(view, self._fields)
        self._parsed[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def objects(self) -> Iterator[str]:
        """The keys whose value is a JSON object, none of them parsed (msgspec's `Raw` begins
        with the value's first byte)."""
        for key, raw in self._raw.items():
            if key in self._parsed:
                if isinstance(self._parsed[key], dict):
                    yield key
            elif memoryview(raw)[:1].tobytes() == b"{":
                yield key

    def reduced(self, fields: tuple[str, ...]) -> LazyMapping:
        """Each value that is an object with only `fields` kept (a value that is no object as
        it is), read when first read: what a reader of those fields alone sees, at a fraction
        of a parse, and nothing of the values never read."""
        parsed = {key: ({f: value[f] for f in fields if f in value}
                        if isinstance(value, dict) else value)
                  for key, value in self._parsed.items()}
        return LazyMapping(self._raw, parsed, fields)


def _kept(view: memoryview, fields: tuple[str, ...]) -> Any:
    """The JSON value `view` with only `fields` if it is an object (each parsed by orjson, as
    a whole parse would), else as it is."""
    try:
        kept = _fields_decoder(fields).decode(view)
    except msgspec.ValidationError:  # not an object
        return orjson.loads(view)
    return {field: orjson.loads(memoryview(part)) for field, part
            in zip(fields, msgspec.structs.astuple(kept), strict=True) if len(part)}


def reduced(mapping: Mapping[str, Any], fields: tuple[str, ...]) -> Mapping[str, Any]:
    """`mapping` for a reader of `fields` of its values alone: read lazily, only those are
    parsed, each value when it is read (`LazyMapping.reduced`); a parsed mapping is handed
    back as it is."""
    return mapping.reduced(fields) if isinstance(mapping, LazyMapping) else mapping


def objects(mapping: Mapping[str, Any]) -> Iterator[str]:
    """The keys of `mapping` whose value is an object (a `Mapping`): of a lazily read one,
    without parsing any (`LazyMapping.objects`)."""
    if isinstance(mapping, LazyMapping):
        return mapping.objects()
    return (key for key, value in mapping.items() if isinstance(value, Mapping))


def lazy_packument(body: bytes) -> LazyMapping | None:
    """`body` (a registry's 200 for a packument) read lazily for a one-version gating: its
    `versions` one by one, and of its other fields those that gating reads (`_OneVersion`).
    None when it must be parsed whole, which then accepts or refuses it as always: not a JSON
    object, no `versions` object (an unpublished tombstone, or no packument: its refusal names
    the keys it has), JSON msgspec refuses (malformed, or nested deeper than its limit, below
    orjson's 1,024), or bytes that are not UTF-8 (msgspec does not check inside the strings it
    skips). The departure: a number beyond a double's range
    (`1e400`) in a value never read is not seen, where a whole parse refuses the document;
    read, it raises `orjson.JSONDecodeError`."""
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        read = _ONE_VERSION.decode(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError: `versions` is no object
        return None
    if read.versions is None:
        return None
    fields = {"name": read.name, "time": read.time, "dist-tags": read.tags}
    raw = {field: value for field, value in fields.items() if len(value)}
    raw["versions"] = _ABSENT  # listed among the keys; read from `parsed`
    return LazyMapping(raw, parsed={"versions": LazyMapping(read.versions)})
