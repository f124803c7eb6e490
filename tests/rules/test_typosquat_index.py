"""The typosquat index held compactly finds what the dictionary of deletions found, and the
shipped list's index is built once however many first pulls ask for it at once.

The reference below is the index as it was (every deletion a string key of a list of names):
the compact one (hashes in a sorted array) must name the same widely used package for every
squat, and nothing for a control name no edit away from one."""

from __future__ import annotations

import random
import threading

from mirrorgate.rules import typosquat
from mirrorgate.rules.typosquat import MIN_LENGTH, NameIndex, distance, popular_names


class _DictIndex:
    """The dictionary-of-lists index, as the typosquat signal first held it."""

    def __init__(self, names: list[str]) -> None:
        self.names = frozenset(names)
        self.by_folded: dict[str, str] = {}
        self.by_deletion: dict[str, list[str]] = {}
        for name in sorted(self.names):
            folded = typosquat._folded(name)
            if len(folded) < MIN_LENGTH:
                continue
            self.by_folded.setdefault(folded, name)
            for variant in typosquat._deletions(folded):
                self.by_deletion.setdefault(variant, []).append(name)

    def near(self, name: str) -> str | None:
        if name in self.names:
            return None
        folded = typosquat._folded(name)
        if len(folded) < MIN_LENGTH:
            return None
        if folded in self.by_folded:
            return self.by_folded[folded]
        seen: set[str] = set()
        for variant in typosquat._deletions(folded):
            for candidate in self.by_deletion.get(variant, ()):
                if candidate not in seen:
                    seen.add(candidate)
                    if distance(folded, typosquat._folded(candidate), 1) <= 1:
                        return candidate
        return None


def _squats(names: list[str], rng: random.Random) -> list[str]:
    """One of each typo a squatter registers, for every name: a letter dropped, added,
    changed, two swapped, the case changed, a suffix."""
    found: list[str] = []
    for name in names:
        at = rng.randrange(len(name) + 1)
        letter = rng.choice("abcdefghijklmnopqrstuvwxyz-._0123456789")
        found += [name[:at] + name[at + 1:], name[:at] + letter + name[at:],
                  name[:at] + letter + name[at + 1:],
                  name[:at] + name[at + 1:at + 2] + name[at:at + 1] + name[at + 2:],
                  name.upper(), f"{name}-js"]
    return found


def test_the_compact_index_names_what_the_dictionary_named_for_every_squat() -> None:
    popular = popular_names()
    names = sorted(popular.names)
    reference = _DictIndex(names)
    rng = random.Random(9)
    squats = _squats(rng.sample(names, 3_000), rng)  # a sixth of the list: seconds, not a minute
    named = [popular.near(squat) for squat in squats]
    assert named == [reference.near(squat) for squat in squats]
    assert sum(found is not None for found in named) > len(squats) // 2  # squats are found
    # controls: names of the list are never squats, nor names no edit away from one
    assert popular.near("lodash") is None
    assert popular.near("lodahs") == "lodash"
    assert popular.near("zq-unrelated-words-here") is None


def test_a_small_index_of_the_names_installed_often_agrees_too() -> None:
    names = ["acme-logger-core", "acme-loggers", "cross-env", "react-dom", "reactdom2", "ms"]
    compact, reference = NameIndex(names), _DictIndex(names)
    squats = [*_squats(names, random.Random(3)), "acme-loger-core", "crossenv", "ns"]
    assert [compact.near(s) for s in squats] == [reference.near(s) for s in squats]
    assert compact.near("acme-loger-core") == "acme-logger-core"
    assert NameIndex(()).near("acme-loger-core") is None  # control: an empty index


def test_the_shipped_index_is_built_once_however_many_threads_ask_at_once() -> None:
    typosquat._popular_names.cache_clear()
    built: list[NameIndex] = []
    real = NameIndex.__init__

    def counting(self: NameIndex, names: object) -> None:
        real(self, names)  # type: ignore[arg-type]
        built.append(self)

    NameIndex.__init__ = counting  # type: ignore[method-assign]
    try:
        answers: list[NameIndex] = []
        threads = [threading.Thread(target=lambda: answers.append(popular_names()))
                   for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        NameIndex.__init__ = real  # type: ignore[method-assign]
    assert len(built) == 1  # six first pulls at once: one index, not six side by side
    assert all(answer is built[0] for answer in answers)
