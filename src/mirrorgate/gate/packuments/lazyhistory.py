"""A package's releases as the baseline walk reads them, each gated only as the walk reaches it.

A first pull compared with the release before it needed the whole packument's gating (every
version judged and serialised, thousands for the one or two the walk reads). Here the versions
are ordered by the times the gating would give them, read from the documents, and each is
gated alone (`merge.Gating`, `gate(only=)`'s own steps) when reached: the same records, times
and contradictions as the whole gating, checked by tests/gate/test_lazy_baseline.py.
docs/verdicts.md#the-baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from mirrorgate.gate.packuments.merge import Gating
from mirrorgate.gate.packuments.times import TOLERANCE, order_contradicted
from mirrorgate.gate.records import Gated, VersionRecord, readable
from mirrorgate.moments import moment
from mirrorgate.npm.versions import is_prerelease, order_key

__all__ = ["LazyHistory"]


class LazyHistory:
    """A `gate.verdicts.baseline.History` over one package's documents (`Gating`), whose versions
    are gated alone as they are read, once each."""

    def __init__(self, gating: Gating) -> None:
        self.gating = gating
        self.listed = gating.listed()
        """Each version that could have a record, in the order the gating records them, with
        the time it would have once admitted."""
        self._read = {text: (order_key(text), moment(stamp)) for text, stamp in self.listed.items()}
        """Each listed version's place in version order and its time, read once: every walk
        of the name reads them all."""
        self._alone: dict[str, Gated] = {}
        self._survives: dict[str, bool] = {}
        self._doubts: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.gating.name.full

    def gated(self, version: str) -> Gated:
        """`version` gated alone, once."""
        found = self._alone.get(version)
        if found is None:
            found = self._alone[version] = self.gating.gate(version)
            self._survives[version] = version in found.time
        return found

    def time(self, version: str) -> str | None:
        return self.gated(version).time.get(version)

    def _record(self, version: str) -> VersionRecord | None:
        return self.gated(version).versions.get(version)

    def earlier(self, version: str) -> Iterator[VersionRecord]:
        """`baseline.earlier_releases` of the whole gating, gating each only when reached:
        ordered by the times the versions would have (the whole gating's, a denied one then
        having none and being skipped), ties by version, then by the order listed."""
        published = moment(self.time(version))
        if published is None:
            return
        own, prerelease = order_key(version), is_prerelease(version)
        dated: list[tuple[datetime, tuple[object, ...], str]] = []
        for text, (key, when) in self._read.items():
            # a prerelease (its key's fourth part 0) is a baseline only for a prerelease
            if (when is None or key is None or text == version
                    or (key[3] == 0 and not prerelease)):
                continue
            # published together (one second apart, or the same stamp): the lower version first
            if when < published or (when == published and own is not None and key < own):
                dated.append((when, key, text))
        dated.sort(key=lambda item: (item[0], item[1]), reverse=True)  # stable, as the whole's
        for _, _, text in dated:
            record = self._record(text)
            if record is not None and readable(record, version) and self._survives[text]:
                yield record

    def lower(self, version: str) -> Iterator[VersionRecord]:
        """`baseline.lower_releases` of the whole gating, gating each only when reached."""
        own = order_key(version)
        if own is None:
            return
        prerelease = is_prerelease(version)
        lower = [(key, text) for text, (key, _when) in self._read.items()
                 if key is not None and key < own and text != version
                 and (prerelease or key[3] != 0)]
        lower.sort(key=lambda item: item[0], reverse=True)
        for _, text in lower:
            record = self._record(text)
            if record is not None and readable(record, version):
                yield record

    def _survivor(self, version: str) -> bool:
        """Whether `version` has a time in the whole gating (admitted, with one readable):
        judged alone, its record not kept (contradictions read many versions' verdicts)."""
        found = self._survives.get(version)
        if found is None:
            found = self._survives[version] = version in self.gating.gate(version).time
        return found

    def doubts(self) -> tuple[str, ...]:
        """`order_contradicted` of the whole gating's times, judging only the versions that
        can change it. A major whose versions' times never run backwards by more than the
        tolerance between any two of them in version order contradicts nothing whichever of
        them survive (every pair `order_contradicted` compares is such a pair), so none of
        them is read. In another major, within a release line (major.minor) whose times never
        run backwards, no subset contradicts, and only its lowest survivor (the line's
        opening) and the first survivor listed (where the line first appears, which orders
        the sentences) are read; a line whose times do run backwards has each version judged."""
        if self._doubts is not None:
            return self._doubts
        majors: dict[int, dict[int, list[tuple[int, datetime, str]]]] = {}
        for text, (key, when) in self._read.items():
            if key is None or key[3] == 0 or when is None:  # as `order_contradicted` reads
                continue
            majors.setdefault(key[0], {}).setdefault(key[1], []).append((key[2], when, text))
        lines: dict[tuple[int, int], list[tuple[int, datetime, str]]] = {}
        for major, of_major in majors.items():
            if not _runs_backwards(sorted((minor, *entry) for minor, line in of_major.items()
                                          for entry in line)):
                continue  # no sentence from it, and its absence orders no other's
            lines.update(((major, minor), line) for minor, line in of_major.items())
        standing: dict[str, str] = {}  # a line's first survivor listed -> the version shown
        judged_all: set[tuple[int, int]] = set()
        for line_key, line in lines.items():
            ordered = sorted(line)
            if _runs_backwards(ordered):
                judged_all.add(line_key)
                continue
            opening = next((text for _p, _w, text in ordered if self._survivor(text)), None)
            if opening is None:
                continue  # nothing of the line survives: not read at all
            first = next(text for _p, _w, text in line if self._survivor(text))
            standing[first] = opening
        times: dict[str, str] = {}
        for text, (key, when) in self._read.items():
            stamp = self.listed[text]
            if key is None or key[3] == 0 or stamp is None or when is None:
                continue
            if (key[0], key[1]) in judged_all:
                if self._survivor(text):
                    times[text] = stamp
            elif text in standing:
                shown = standing[text]
                shown_stamp = self.listed[shown]
                assert shown_stamp is not None  # a line's versions all carry a time
                times[shown] = shown_stamp
        self._doubts = order_contradicted(times)
        return self._doubts


def _runs_backwards(ordered: Iterable[tuple[Any, ...]]) -> bool:
    """Whether, in `ordered` (version order: each entry's time is its second to last item),
    a version's time is later than a higher one's by more than the tolerance."""
    latest: datetime | None = None
    for entry in ordered:
        when: datetime = entry[-2]
        if latest is not None and latest > when + TOLERANCE:
            return True
        latest = when if latest is None or when > latest else latest
    return False
