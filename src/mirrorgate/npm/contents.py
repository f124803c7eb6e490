"""What a release's tarball holds, as the release signals compare it: what runs at install and
the marks of each JavaScript file.

Read in the same pass as the install-scripts scan (`tarscripts.ScriptScan`, which reads
the entries as npm unpacks them, `tarball`), so a tarball is inflated once whatever reads
it. Pure, incremental,
bounded: at most `MAX_CODE_FILES` files and `MAX_CODE_BYTES` bytes measured, each file's first
`jsmarks.READ_PER_FILE` bytes; what was not read is said in `Contents.unread`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mirrorgate.npm.jsmarks import READ_PER_FILE, FileMarks, digest_of, is_code, marks_of
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS
from mirrorgate.npm.tarscripts import ScriptScan

__all__ = ["MAX_CODE_BYTES", "MAX_CODE_FILES", "ContentReading", "Contents", "contents_of",
           "manifest_runs"]

MAX_CODE_FILES = 5_000
"""JavaScript files measured at most per tarball (the largest packages ship a few thousand)."""
MAX_CODE_BYTES = 64 * 1024 * 1024
"""JavaScript bytes measured at most per tarball: about a second of CPU."""
_STEP = 256 * 1024


@dataclass(frozen=True, slots=True)
class Contents:
    """One tarball as the release signals read it. `runs`: what runs at install, each as
    `where: hook (command)`; `code`: the marks of each JavaScript file by its path inside the
    package; `unread`: the bounds that stopped the reading short (empty: all of it was read);
    `problem`: why the contents could not be read at all."""

    runs: tuple[str, ...] = ()
    code: dict[str, FileMarks] = field(default_factory=dict)
    unread: tuple[str, ...] = ()
    problem: str | None = None
    scripts: dict[str, str] = field(default_factory=dict)
    """The root package.json's install hooks, each command whole (`runs` cuts them short):
    what `rules.release` compares with the previous version's."""

    @property
    def hooks(self) -> frozenset[str]:
        """What runs at install, without the commands: `postinstall`, `node_modules/x: install`."""
        return frozenset(run.split(" (", 1)[0] for run in self.runs)


class ContentReading:
    """A `FileWatch` that measures JavaScript files, and the scan it rides on: feed the
    tarball's bytes to `scan`, then `contents()`. A file whose bytes are those of the same
    path in `reuse` (the other version's reading) takes its marks from there unmeasured: in a
    patch release most files are unchanged, and measuring is most of the cost."""

    def __init__(self, reuse: Mapping[str, FileMarks] | None = None) -> None:
        self.scan = ScriptScan(self)
        self._reuse = reuse or {}
        self._code: dict[str, FileMarks] = {}
        self._measured = 0
        self._skipped_files = 0
        self._partial: list[str] = []

    def wants(self, path: str, size: int) -> int:
        if not is_code(path):
            return 0
        if len(self._code) >= MAX_CODE_FILES or self._measured >= MAX_CODE_BYTES:
            self._skipped_files += 1
            return 0
        keep = min(size, READ_PER_FILE, MAX_CODE_BYTES - self._measured)
        self._measured += keep
        return keep

    def read(self, path: str, data: bytes, size: int) -> None:
        inside = path  # where npm writes it, inside the package
        digest = digest_of(data)
        known = self._reuse.get(inside)
        if known is not None and known.digest == digest and known.size == size:
            marks = known
        else:
            marks = marks_of(data, size, digest)
        if not marks.whole and len(self._partial) < 5:
            self._partial.append(f"{inside} read to byte {len(data)} of {size}")
        self._code[inside] = marks  # the last entry of a path wins, as on disk

    def contents(self) -> Contents:
        scan = self.scan
        scan.finish()  # a stream cut short, or ending inside an entry, is a problem too
        if scan.problem is not None:
            return Contents(problem=scan.problem)
        commands: dict[str, object] = {}
        scripts = scan.manifest.get("scripts") if scan.manifest is not None else None
        if isinstance(scripts, dict):
            commands = scripts
        runs: list[str] = []
        for folder, hooks in sorted(scan.scripts.items()):
            for hook in hooks:
                where = f"{folder}: {hook}" if folder else hook
                command = commands.get(hook) if not folder else None
                runs.append(f"{where} ({str(command)[:120]})" if isinstance(command, str)
                            else where)
        runs += [f"{folder}: binding.gyp" if folder else "binding.gyp"
                 for folder in scan.gyp_runs()]
        unread = list(self._partial)
        if self._skipped_files:
            unread.append(f"{self._skipped_files} JavaScript files past the first "
                          f"{MAX_CODE_FILES} or past {MAX_CODE_BYTES} bytes")
        whole = {hook: command for hook, command in commands.items()
                 if hook in INSTALL_SCRIPT_KEYS and isinstance(command, str) and command}
        return Contents(tuple(runs), dict(self._code), tuple(unread), scripts=whole)


def contents_of(tarball: bytes, reuse: Mapping[str, FileMarks] | None = None) -> Contents:
    """`ContentReading` over a whole tarball held in memory (the previous version's, read
    once the new one's `reuse` is known)."""
    reading = ContentReading(reuse)
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        reading.scan.feed(bytes(view[start:start + _STEP]))
    return reading.contents()


def manifest_runs(manifest: dict[str, object]) -> tuple[str, ...]:
    """What a registry manifest says runs at install, as `Contents.runs` writes it."""
    scripts = manifest.get("scripts")
    if not isinstance(scripts, dict):
        return ()
    return tuple(f"{key} ({str(scripts[key])[:120]})" for key in INSTALL_SCRIPT_KEYS
                 if scripts.get(key) not in (None, ""))
