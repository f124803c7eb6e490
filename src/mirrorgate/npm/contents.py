"""What a release's tarball holds, as the release signals compare it: what runs at install and
the marks of each JavaScript file.

Read in the same pass as the install-scripts scan (`tarscripts.ScriptScan`, which reads
the entries as npm unpacks them, `tarball`), so a tarball is inflated once whatever reads
it. Pure, incremental, bounded: at most `MAX_CODE_FILES` JavaScript files and `MAX_CODE_BYTES`
bytes measured, each file's first `jsmarks.READ_PER_FILE` bytes, what was not read said in
`Contents.unread`; a file that runs (`npm.entrypoints`, any extension) whole, up to
`READ_RUN_FILE`, and one past the bounds carries the `unmeasured` mark, which refuses. A lean
reading holds files' bytes (`DEFERRED_BYTES`) and reads only those a walk of what runs asks for.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from mirrorgate.npm.capabilities import Capabilities, Layout, capabilities_of
from mirrorgate.npm.entrypoints import requires_of, run_files
from mirrorgate.npm.jsmarks import (
    READ_PER_FILE,
    UNMEASURED,
    FileMarks,
    Mark,
    digest_of,
    is_code,
    marks_of,
    obfuscator_marks,
)
from mirrorgate.npm.jsuses import ReadBudget, uses_of
from mirrorgate.npm.scripts import INSTALL_SCRIPT_KEYS
from mirrorgate.npm.specs import installed_dependencies
from mirrorgate.npm.tarscripts import ScriptScan

__all__ = ["DEFERRED_BYTES", "KEPT_BYTES", "MAX_CODE_BYTES", "MAX_CODE_FILES",
           "MAX_RUN_BYTES", "READ_RUN_FILE", "ContentReading", "Contents", "KeptReadings",
           "contents_of", "manifest_runs"]

MAX_CODE_FILES = 5_000
"""JavaScript files measured at most per tarball (the largest packages ship a few thousand)."""
MAX_CODE_BYTES = 64 * 1024 * 1024
"""JavaScript bytes measured at most per tarball: about a second of CPU."""
READ_RUN_FILE = 32 * 1024 * 1024
"""Bytes of one file that runs measured at most: it is measured whole or refused (the
largest entry files of real packages, typescript's, are under 10 MiB)."""
MAX_RUN_BYTES = 128 * 1024 * 1024
"""Bytes measured at most per tarball past what `MAX_CODE_BYTES` counts: JavaScript files past
their first `READ_PER_FILE` bytes, and files of other kinds (any may be required and run);
a file that runs and falls past it is refused, never passed unread."""
KEPT_BYTES = 12 * 1024 * 1024
"""What `KeptReadings` holds at most, by `_bytes_of`'s estimate. A version pushed out is fetched
and read again if a later release chooses it as its baseline, or a job asks for it with no
verdict kept: CPU and a download, never another verdict. A cold install's jobs find their
verdicts kept (the reading is not asked for), and its baselines are the releases pulled just
before. Bounded by 200,000 files and 4,096 readings instead, the readings of axios's real
lockfile with every protection on (3,000 of them, 80,000 files) came to 32 MiB of objects, a
tenth of the process's peak, and its lookups found 47 of 1,609; at 12 MiB they find 23, and
the other 24 are fetched and read again, for no CPU the runs could tell apart (29.6 to 30.5 s
of it in all at 12 MiB, 29.9 to 34.6 before)."""
_READING_BYTES = 2_800
_FILE_BYTES = 330
"""A kept reading's objects: its own (root package.json, layout, capabilities: 2.4 to 2.8 KB for
the smallest package) and each path its layout lists and each file's marks (about 320 bytes),
measured over axios's real lockfile's readings with every signal on (a deep `getsizeof` of
3,000 readings against their counts). A package of 100,000 images and no JavaScript weighs
its 100,000 paths."""
DEFERRED_BYTES = 8 * 1024 * 1024
"""Bytes a lean reading holds at most until it knows which files run (`ContentReading`): the
files held are read only if they run, those past it as they come. Most tarballs unpack to
less; a third of the lean reading's CPU went to files that never run."""
_STEP = 256 * 1024
_NOT_RUN = (".json", ".node", ".d.ts", ".d.mts", ".d.cts", ".flow")
"""Never run as JavaScript: node parses a required .json and loads a .node natively; a type
declaration is TypeScript's or Flow's (JSDoc `import('./x.d.ts')` and Flow's `import type`
name them)."""
_NOT_CODE = (".map", ".md", ".markdown", ".txt", ".woff", ".woff2", ".ttf", ".otf", ".eot",
             ".wasm", ".lock", ".yml", ".yaml")
"""Kinds of file nothing requires in practice, and a large share of a package's bytes (source
maps above all): not read, so one that is required is `unmeasured` (refused). Images are
read: React Native's packages require them."""


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
    dependencies: dict[str, str] = field(default_factory=dict)
    """What the root package.json says npm installs with it, by key (`npm.specs`): npm reads
    the registry's manifest to build a tree, and this one once the package is on disk."""
    layout: Layout = field(default_factory=Layout)
    capabilities: Capabilities = field(default_factory=Capabilities)
    """What its code can do at install and at load (`npm.capabilities`), as its own
    package.json runs it (`rules.capabilities` adds the registry manifest's hooks)."""
    lean: bool = False
    """Read for the capability signals alone (`ContentReading`): no mark but the
    obfuscator's, no digest; not a baseline for the other signals."""

    @property
    def hooks(self) -> frozenset[str]:
        """What runs at install, without the commands: `postinstall`, `node_modules/x: install`."""
        return frozenset(run.split(" (", 1)[0] for run in self.runs)


class ContentReading:
    """A `FileWatch` that measures JavaScript files, and the scan it rides on: feed the
    tarball's bytes to `scan`, then `contents()`. A file whose bytes are those of the same
    path in `reuse` (the other version's reading) takes its marks from there unmeasured: in a
    patch release most files are unchanged, and measuring is most of the cost."""

    def __init__(self, reuse: Mapping[str, FileMarks] | None = None, *,
                 lean: bool = False, commands: Mapping[str, str] | None = None) -> None:
        self.scan = ScriptScan(self)
        self._lean = lean
        """Only what the capability signals read (the default rules): each file's
        capabilities, requires and obfuscator's marks, no digest, no other mark, nothing
        lent (docs/serving.md "What a release's code can do": half the CPU), and of the
        files held (`DEFERRED_BYTES`) only those that run."""
        self._commands = dict(commands or {})
        """The registry manifest's install hooks (`rules.release.Release.commands`): the
        files they run are read too, as `rules.capabilities.of_release` walks them."""
        self._pending: dict[str, tuple[bytes, int]] = {}  # held files' bytes, and sizes
        self._held = 0  # bytes in `_pending`
        self._placeholders: dict[str, FileMarks] = {}  # what stands for a held file's marks
        self._read: dict[str, FileMarks] = {}  # held files read once asked for
        self._reuse = {} if lean else (reuse or {})
        self._code: dict[str, FileMarks] = {}
        self._measured = 0
        self._skipped_files = 0
        self._beyond = 0  # bytes measured past what `MAX_CODE_BYTES` counts
        self._whole: dict[str, FileMarks] = {}  # files measured whole past their head
        self._unmeasured: dict[str, str] = {}  # files not measured whole, and why
        self._requires: dict[str, tuple[str, ...]] = {}
        self._files: dict[str, int] = {}  # every file with bytes, and its size
        self._heads: dict[str, int] = {}  # JavaScript files: the bytes measured as before
        self._budget = ReadBudget()  # the code parsed for capabilities (`npm.jsuses`)
        self._settled: Contents | None = None  # `settle()`'s, on the thread that read the bytes

    @property
    def lean(self) -> bool:
        return self._lean

    def lend(self, reuse: Mapping[str, FileMarks]) -> None:
        """Take `reuse` from here on: the release compared with is known only once the gate
        chose it (`gate.verdicts.baseline`), often after the first bytes were fed. Files measured
        before were measured in full, the same marks; one replacing assignment, so a feed on
        the hashing lane sees either mapping whole. A lean reading takes nothing lent."""
        if not self._lean:
            self._reuse = reuse

    def wants(self, path: str, size: int) -> int:
        if path in self._pending:
            self._resolved(path)  # read now, as an earlier entry was: a later one replaces it
        self._read.pop(path, None)
        self._files[path] = size  # a later entry of the same path replaces what was read
        for read in (self._unmeasured, self._whole, self._requires):
            read.pop(path, None)
        head = 0
        lower = path.lower()
        if is_code(path):
            if len(self._code) >= MAX_CODE_FILES or self._measured >= MAX_CODE_BYTES:
                self._skipped_files += 1  # not read as before; read whole below if it may run
            else:
                head = min(size, READ_PER_FILE, MAX_CODE_BYTES - self._measured)
                self._measured += head
                self._heads[path] = head
        elif lower.endswith(_NOT_RUN):
            return 0
        elif lower.endswith(_NOT_CODE):
            self._unmeasured[path] = "not read: files of its kind are not code"
            return 0
        # the rest of the file, in case it runs: known only once every file has been seen
        more = min(size, READ_RUN_FILE) - head
        if size > READ_RUN_FILE or self._beyond + more > MAX_RUN_BYTES:
            self._unmeasured[path] = (f"{size:,} bytes, past the {READ_RUN_FILE:,} measured "
                                      "of a file that runs" if size > READ_RUN_FILE else
                                      f"past the {MAX_RUN_BYTES:,} bytes measured in all")
            return head
        self._beyond += more
        return head + more

    def read(self, path: str, data: bytes, size: int) -> None:
        # a JavaScript file's head is measured as the bounds have always read it; a file read
        # past its head (any file, in case it runs) is measured whole as well
        head = self._heads.get(path, 0)
        if self._lean and self._held + len(data) <= DEFERRED_BYTES:
            # held until the walk asks for it (`_contents`): most files of a package never
            # run, and a lean reading reads only for the capabilities of those that do; one
            # read measure stands for the head and the whole, as below
            self._pending[path] = (data, size)
            self._held += len(data)
            held = self._placeholders[path] = FileMarks(size, whole=len(data) >= size)
            if head:
                self._code[path] = held if head >= len(data) else FileMarks(size, whole=False)
            if len(data) > head:
                self._whole[path] = held
            return
        whole = self._measure(path, data, size) if len(data) > head else None
        if head:
            self._code[path] = self._measure(path, data, size, head)
        if whole is not None:
            self._whole[path] = whole
        read = whole if whole is not None else self._code.get(path)
        self._requires[path] = read.requires if read is not None else ()

    def _resolved(self, path: str) -> FileMarks:
        """A held file's marks, read the first time they are asked for (as `read` would have
        read them); its placeholder once the bytes are dropped (`_contents`)."""
        found = self._read.get(path)
        if found is not None:
            return found
        held = self._pending.pop(path, None)
        if held is None:
            return self._placeholders[path]
        data, size = held
        self._held -= len(data)
        found = self._read[path] = self._measure(path, data, size)
        for marks in (self._code, self._whole):
            if marks.get(path) is self._placeholders[path]:
                marks[path] = found
        self._requires[path] = found.requires
        return found

    def _measure(self, path: str, data: bytes, size: int, head: int | None = None) -> FileMarks:
        """The marks of `data` (its first `head` bytes), taken from the other version's same
        file where its bytes are these (the last entry of a path wins, as on disk)."""
        if self._lean:
            if head is not None and head < len(data):
                return FileMarks(size, whole=False)  # a head: nothing the capabilities read
            uses = uses_of(data, self._budget)
            return FileMarks(size, tuple(obfuscator_marks(data, escapes=False)),
                             len(data) >= size,
                             requires=uses.requires, uses=uses)
        part = data[:head] if head is not None and head < len(data) else data
        digest = digest_of(part)
        known = self._reuse.get(path)
        if known is not None and known.digest == digest and known.size == size:
            return known
        marks = marks_of(part, size, digest)
        if part is not data:
            return marks
        return replace(marks, requires=requires_of(data), uses=uses_of(data, self._budget))

    def settle(self) -> None:
        """Every byte fed: `contents()` worked out now, where the bytes were read (the relay's
        reading lane: `ScriptScan.settle`), and kept for the verdict on the event loop."""
        if self._settled is None:
            self._settled = self._contents()
            self._budget.trees.clear()  # the windows' trees serve bytes to come: there are none

    def contents(self) -> Contents:
        """What the bytes fed hold: settled on the reading lane (`settle`), else now."""
        return self._settled if self._settled is not None else self._contents()

    def _contents(self) -> Contents:
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
        code = _Asked(self, dict(self._code))
        run, overrun = run_files(scan.manifest, self._files, _Requires(self))
        if overrun is not None:  # a walk that stopped at its bound refuses, as an unread file
            code["package.json"] = FileMarks(0, (
                Mark(UNMEASURED, 0, 1, f"the files that run were not all followed: {overrun}"),),
                whole=False)
        for path in sorted(run):
            lower = path.lower()
            if lower.endswith(_NOT_RUN) or (lower.endswith(_NOT_CODE)
                                            and not run[path].startswith("required by ")):
                continue  # an `exports` pattern's README or declarations: node runs code only
            why = self._unmeasured.get(path)
            if why is not None:  # a bound overrun: refused, never passed unread
                code[path] = FileMarks(self._files[path], (
                    Mark(UNMEASURED, 0, 1, f"{run[path]}: {why}"),), whole=False)
            elif path in self._whole:
                code[path] = self._whole[path]
        unread = [f"{path} read to byte {self._read_of(path)} of {marks.size}"
                  for path, marks in self._code.items()
                  if not marks.whole and path not in run][:5]
        if self._skipped_files:
            unread.append(f"{self._skipped_files} JavaScript files past the first "
                          f"{MAX_CODE_FILES} or past {MAX_CODE_BYTES} bytes")
        whole = {hook: command for hook, command in commands.items()
                 if hook in INSTALL_SCRIPT_KEYS and isinstance(command, str) and command}
        installs = {key: how.spec for key, how in installed_dependencies(
            scan.manifest).items()} if scan.manifest is not None else {}
        layout = Layout(scan.manifest or {}, frozenset(self._files), dict(scan.bundled),
                        tuple(scan.gyp_runs()))
        capabilities = capabilities_of(layout, code)
        extra = {hook: command for hook, command in self._commands.items()
                 if whole.get(hook) != command}
        if extra and self._pending:
            capabilities_of(layout, code, extra)  # only to read the files those hooks run
        # the bytes of files nothing asked for are dropped: each stays its placeholder, read
        # by a later walk as code not read whole (`capabilities._record`), never as clean
        self._pending.clear()
        self._held = 0
        return Contents(tuple(runs), code.marks, tuple(unread), scripts=whole,
                        dependencies=installs, layout=layout, capabilities=capabilities,
                        lean=self._lean)

    def _read_of(self, path: str) -> int:
        return self._heads[path]


class _Asked(Mapping[str, FileMarks]):
    """A reading's marks by path, as the walks of what runs ask for them: a held file's are
    read then (`ContentReading._resolved`) and kept in `marks`."""

    def __init__(self, reading: ContentReading, marks: dict[str, FileMarks]) -> None:
        self._reading = reading
        self.marks = marks

    def __getitem__(self, path: str) -> FileMarks:
        found = self.marks[path]
        if found is self._reading._placeholders.get(path):
            found = self.marks[path] = self._reading._resolved(path)
        return found

    def __setitem__(self, path: str, marks: FileMarks) -> None:
        self.marks[path] = marks

    def __iter__(self) -> Iterator[str]:
        return iter(self.marks)

    def __len__(self) -> int:
        return len(self.marks)


class _Requires(Mapping[str, tuple[str, ...]]):
    """A reading's requires by path, a held file read when the walk asks for its own."""

    def __init__(self, reading: ContentReading) -> None:
        self._reading = reading

    def __getitem__(self, path: str) -> tuple[str, ...]:
        if path in self._reading._pending:
            return self._reading._resolved(path).requires
        return self._reading._requires[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reading._requires.keys() | self._reading._pending.keys())

    def __len__(self) -> int:
        return len(self._reading._requires.keys() | self._reading._pending.keys())


class KeptReadings:
    """The readings of the versions read last, by (name, version, integrity): the next
    release of a package is compared with one of them, whose tarball then needs neither a
    fetch nor a read (the same bytes read the same). The oldest go first past `max_bytes`
    (`_bytes_of`)."""

    def __init__(self, max_bytes: int = KEPT_BYTES) -> None:
        self._max_bytes = max_bytes
        self._kept: OrderedDict[tuple[str, str, str], Contents] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: tuple[str, str, str]) -> Contents | None:
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
        return found

    def keep(self, key: tuple[str, str, str], read: Contents) -> None:
        if read.problem is not None or not key[2] or key in self._kept:
            return  # a version without a digest has no bytes to name
        self._kept[key] = read
        self._bytes += _bytes_of(read)
        while self._bytes > self._max_bytes and self._kept:
            _key, dropped = self._kept.popitem(last=False)
            self._bytes -= _bytes_of(dropped)


def _bytes_of(read: Contents) -> int:
    """What a kept reading counts against `KEPT_BYTES`: its own objects, and every path its
    layout lists and each file's marks (`_FILE_BYTES`)."""
    return _READING_BYTES + _FILE_BYTES * (len(read.layout.files) + len(read.code))


def contents_of(tarball: bytes, reuse: Mapping[str, FileMarks] | None = None, *,
                lean: bool = False, commands: Mapping[str, str] | None = None) -> Contents:
    """`ContentReading` over a whole tarball held in memory (the previous version's, read
    once the new one's `reuse` is known)."""
    reading = ContentReading(reuse, lean=lean, commands=commands)
    view = memoryview(tarball)
    for start in range(0, len(view), _STEP):
        reading.scan.feed(bytes(view[start:start + _STEP]))
    reading.scan.settle()
    return reading.contents()


def manifest_runs(manifest: dict[str, object]) -> tuple[str, ...]:
    """What a registry manifest says runs at install, as `Contents.runs` writes it."""
    scripts = manifest.get("scripts")
    if not isinstance(scripts, dict):
        return ()
    return tuple(f"{key} ({str(scripts[key])[:120]})" for key in INSTALL_SCRIPT_KEYS
                 if scripts.get(key) not in (None, ""))
