"""The rules in force, and the rules file read again when it changes: policy without a restart.

Every component reads `LiveRules.current` when it judges, never a copy taken at start-up. The
file is looked at every `POLL_SECONDS` (its identity, following links, so Kubernetes' ConfigMap
swap of the `..data` symlink is seen like an edit in place) and read again when it changed; new
rules replace the old only when they compile, with the next `generation`, so a packument gated
with the old ones is gated again before it is served. A rewrite that does not compile, or that
looks cut short (`_cut_short`), keeps the last good rules, and says so until a good file is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from mirrorgate.rules.file import RulesError, parse_rules, rules_text, with_known_malware
from mirrorgate.rules.policy import DEFAULT_RULES, RuleException, Rules

__all__ = ["POLL_SECONDS", "LiveRules", "live"]

log = structlog.get_logger("mirrorgate.rules")

POLL_SECONDS = 0.5
"""How often the file's identity is looked at: a change is read once it held still for one
poll (`LiveRules.due`), so it is in force within two seconds."""

_Identity = tuple[int, int, int, int]


def _identity(path: Path) -> _Identity | None:
    try:
        found = os.stat(path)  # follows links: a swapped symlink is a new file
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _tables(document: dict[str, Any]) -> list[str]:
    """The tables a rules document writes (`[deny]`, `[[exception]]`...), not its `mode`."""
    return sorted(key for key, value in document.items() if isinstance(value, dict | list))


def _cut_short(text: str, in_force: str) -> str | None:
    """Why a rewrite that compiles is nonetheless not taken (None: it is): the shapes a
    truncating save, `> rules.toml` or a renamed ConfigMap key leave, all valid TOML that
    would load as the defaults (docs/serving.md#a-rules-file-emptied-or-cut-short)."""
    document = tomllib.loads(text)  # it compiled, so it parses
    if not document:
        # 1. a file that sets nothing (empty, blank, comments only); to run on the defaults
        # on purpose, write `mode = "enforce"`, or unset MIRRORGATE_RULES_FILE
        return ("the rules file sets nothing (empty, or comments only), which reads as a "
                "truncated write; to run on the defaults write mode = \"enforce\"")
    shown, before = text.rstrip(), in_force.rstrip()  # a final newline added or dropped: same
    if len(shown) < len(before) and before.startswith(shown):
        # 2. the text in force cut short: a write that stopped midway, a full disk
        return ("the rules file is the text in force cut short (its first "
                f"{len(text)} of {len(in_force)} characters), which reads as a truncated "
                "write; to drop its end, change anything else as well")
    kept = _tables(tomllib.loads(in_force)) if in_force else []
    if kept and not _tables(document):
        # 3. every table gone at once (`[deny]`, `[release]`, `[install_scripts]`...)
        return (f"the rules file lost every table the rules in force have ({', '.join(kept)}), "
                "which reads as a truncated write; to drop them all, leave one empty, e.g. [deny]")
    return None


class LiveRules:
    """`current`: the rules in force; `digest`: the sha256 of the text they came from;
    `problem`: why the file as it is now is not in force (None when it is)."""

    def __init__(self, rules: Rules, path: Path | None = None, text: str = "", *,
                 on_reload_failed: Callable[[], None] = lambda: None,
                 check: Callable[[Rules], str | None] = lambda _rules: None,
                 malware_feed: str | None = None) -> None:
        self.malware_feed = malware_feed
        """The known-malware feed each reading of the file gets where it names no source."""
        rules = with_known_malware(rules, malware_feed)
        self.current = rules
        self.from_file = rules
        """The rules as the file says them, before the waivers (`use_waivers`) join them."""
        self.waivers: tuple[RuleException, ...] = ()
        self.path = path
        self.digest = _digest(text)
        self.problem: str | None = None
        self._text = text
        self._on_reload_failed = on_reload_failed
        self.check = check
        """What makes a rewrite that compiles unusable besides itself (None: nothing): the
        process checks that every policy set the tokens file names is still defined."""
        self._identity = _identity(path) if path is not None else None
        self._seen = self._identity  # the file's identity at the previous poll

    @classmethod
    def load(cls, path: Path | None, *,
             on_reload_failed: Callable[[], None] = lambda: None,
             malware_feed: str | None = None) -> LiveRules:
        """The rules at `path` (None: the defaults, never re-read); raises RulesError.
        `on_reload_failed` hears each rewrite that cannot be used (a metric); `malware_feed`
        is MIRRORGATE_MALWARE_FEED (`with_known_malware`)."""
        if path is None:
            return cls(DEFAULT_RULES, malware_feed=malware_feed)
        text = rules_text(path)
        return cls(parse_rules(text, str(path)), path, text, on_reload_failed=on_reload_failed,
                   malware_feed=malware_feed)

    @property
    def generation(self) -> int:
        return self.current.generation

    def due(self) -> bool:
        """Whether to read the file now: it changed, and held still since the previous poll
        (a file being written, its size or time still moving, is read once the write is
        over, not midway: the truncated prefix of a save in progress is never loaded)."""
        if self.path is None:
            return False
        now = _identity(self.path)
        previous, self._seen = self._seen, now
        return now != self._identity and now == previous

    def reload(self) -> bool:
        """Read the file again; True when new rules are now in force. A file that cannot be
        read or compiled, or that looks cut short (`_cut_short`), leaves the rules as they are
        (`problem` says why). A missing file is such a file: only MIRRORGATE_RULES_FILE unset
        means "no rules file"."""
        if self.path is None:
            return False
        self._identity = _identity(self.path)
        try:
            text = rules_text(self.path)
            if _digest(text) == self.digest:  # touched, not changed
                self.problem = None
                return False
            fresh = with_known_malware(parse_rules(text, str(self.path)), self.malware_feed)
            short = _cut_short(text, self._text)
            if short is not None:
                raise RulesError([short], str(self.path))
            unusable = self.check(fresh)
            if unusable is not None:
                raise RulesError([unusable], str(self.path))
        except RulesError as error:
            if self.problem != "; ".join(error.problems):
                self._on_reload_failed()
                log.error("rules_reload_failed", path=str(self.path), problems=error.problems,
                          kept=self.digest)
            self.problem = "; ".join(error.problems)
            return False
        self.from_file = _carried(self.current, fresh)
        self.current = _waived(self.from_file, self.waivers)
        self.digest = _digest(text)
        self._text = text
        self.problem = None
        log.info("rules_reloaded", path=str(self.path), digest=self.digest,
                 generation=self.current.generation)
        return True

    def use_waivers(self, waivers: tuple[RuleException, ...]) -> None:
        """The operator's waivers (`mirrorgate allow`, kept in the state store) beside the
        file's `[[exception]]` entries, applied by the same code; a changed set is the next
        generation, so a packument gated before it is gated again before it is served."""
        if waivers == self.waivers:
            return
        self.waivers = waivers
        self.from_file = _each(self.from_file, lambda rules: dataclasses.replace(
            rules, generation=self.current.generation + 1))
        self.current = _waived(self.from_file, waivers)

    async def watch(self, stop: asyncio.Event,
                    on_reload: Callable[[Rules], None] | None = None) -> None:
        """Re-read the file whenever it changed and settled, until `stop` is set (a change is
        in force within two polls); `on_reload` hears the new rules (the process restarts the
        advisory feed when theirs is new)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            if not stop.is_set() and self.due() and self.reload() and on_reload:
                on_reload(self.current)


def _each(rules: Rules, change: Callable[[Rules], Rules]) -> Rules:
    """`change` made to `rules` and alike to each of its policy sets (`[policy.NAME]`), which
    share its generation, its exceptions and its advisory feed."""
    return dataclasses.replace(change(rules), policies={
        name: change(policy) for name, policy in rules.policies.items()})


def _carried(old: Rules, new: Rules) -> Rules:
    """`new` as the next generation, keeping the advisory feed (and the index it loaded) when
    the `[advisories]` settings did not change."""
    carried = _each(new, lambda rules: dataclasses.replace(rules,
                                                           generation=old.generation + 1))
    if old.advisories is not None and new.advisories is not None \
            and old.advisories == new.advisories:  # the feed itself is not compared
        feed = old.advisories.feed
        carried = _each(carried, lambda rules: rules if rules.advisories is None else
                        dataclasses.replace(rules, advisories=dataclasses.replace(
                            rules.advisories, feed=feed)))
    return carried


def _waived(rules: Rules, waivers: tuple[RuleException, ...]) -> Rules:
    if not waivers:
        return rules
    return _each(rules, lambda each: dataclasses.replace(
        each, exceptions=each.exceptions + waivers, generation=rules.generation))


def live(rules: Rules | LiveRules) -> LiveRules:
    """`rules` as a `LiveRules` (fixed rules never change)."""
    return rules if isinstance(rules, LiveRules) else LiveRules(rules)
