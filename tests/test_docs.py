"""The documentation stays true to the code: every variable, metric and log event is documented,
the configuration reference is the one `config.VARIABLES` renders, the faults table is the one
the faults suite numbers its files by, and every link between the pages lands.

An operator reads README.md and docs/ to configure mirrorgate, to write alerts and to match log
lines, so a variable, a metric or an event name the code has and the docs lack is a defect.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorgate.config import COMMANDS, PROXY, VARIABLES, WORKER, Var
from mirrorgate.configdoc import REGENERATE, render
from mirrorgate.metrics import Metrics
from mirrorgate.rules import rules_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {path.name: path.read_text(encoding="utf-8") for path in sorted(DOCS.glob("*.md"))}
EVERYTHING = "\n".join([README, *PAGES.values()])
LOGGED = re.compile(r"log\.(?:debug|info|warning|error|critical|exception)\(\s*\"([a-z_]+)\"")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
FAULT_ROW = re.compile(r"^\| (\d+) \|", re.MULTILINE)
# Pages other branches add (issues 14, 18 and 19); linked from the README and the index ahead of
# their arrival. A link to one of them is checked like any other once the file is there.
ARRIVING = {"publishing.md", "operations-commands.md", "untrusted-queue.md"}


def logged_events() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "mirrorgate").rglob("*.py"):
        found.update(LOGGED.findall(path.read_text(encoding="utf-8")))
    return found


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, a repeated
    heading numbered."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def links(origin: Path, text: str) -> list[tuple[Path, str]]:
    out = []
    for target in LINK.findall(FENCE.sub("", text)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        page, _, anchor = target.partition("#")
        out.append(((origin.parent / page).resolve() if page else origin, anchor))
    return out


# --- the configuration reference -------------------------------------------------------------


def test_the_configuration_reference_is_the_one_the_variables_render() -> None:
    assert PAGES["configuration.md"] == render(), (
        f"docs/configuration.md is stale: regenerate it with `{REGENERATE}`")


def test_a_changed_variable_makes_the_committed_reference_stale() -> None:
    changed = [Var(VARIABLES[0].name, "elsewhere", VARIABLES[0].help), *VARIABLES[1:]]
    assert render(changed) != PAGES["configuration.md"]


@pytest.mark.parametrize("name", [variable.name for variable in VARIABLES])
def test_every_variable_is_in_the_configuration_reference(name: str) -> None:
    assert f"| `{name}` |" in PAGES["configuration.md"]


@pytest.mark.parametrize("variable", VARIABLES, ids=lambda variable: variable.name)
def test_every_variable_says_who_reads_it_and_links_to_a_section_that_exists(
        variable: Var) -> None:
    assert variable.read_by
    assert set(variable.read_by) <= {PROXY, WORKER, COMMANDS}
    if variable.see is not None:
        page, _, anchor = variable.see.partition("#")
        assert page in PAGES, f"{variable.name}: docs/{page} does not exist"
        assert not anchor or anchor in anchors(PAGES[page]), (
            f"{variable.name}: docs/{page} has no section #{anchor}")


# --- log events and metrics ------------------------------------------------------------------


@pytest.mark.parametrize("event", sorted(logged_events()))
def test_every_log_event_is_documented(event: str) -> None:
    assert f"`{event}`" in EVERYTHING


def test_every_metric_is_documented() -> None:
    names = {metric.name for metric in Metrics().registry.collect()}
    names |= {"mirrorgate_queue_depth", "mirrorgate_jobs_dropped", "mirrorgate_enqueue_failures",
              "mirrorgate_jobs_sent", "mirrorgate_queue_ack_failures",
              "mirrorgate_worker_heartbeat_age_seconds", "mirrorgate_advisory_records",
              "mirrorgate_advisory_age_seconds", "mirrorgate_store_reachable",
              "mirrorgate_store_pending_writes", "mirrorgate_store_pending_kept_writes"}
    missing = sorted(name for name in names if name not in EVERYTHING)
    assert missing == []


# --- the faults table ------------------------------------------------------------------------


def quoted_rows() -> dict[int, str]:
    """Each faults test file quotes its row of the table in its docstring (`> | N | ... |`);
    row 16 is a property of every run, quoted by the suite's conftest."""
    rows: dict[int, str] = {}
    for path in sorted((ROOT / "tests" / "faults").glob("*.py")):
        quoted = [line[2:] for line in path.read_text(encoding="utf-8").splitlines()
                  if line.startswith("> ")]
        if quoted:
            row = " ".join(quoted)
            rows[int(row.split("|")[1])] = row
    return rows


def test_every_faults_test_file_is_numbered_by_a_row_it_quotes_from_the_table() -> None:
    numbered = {int(path.name.split("_")[1])
                for path in (ROOT / "tests" / "faults").glob("test_[0-9][0-9]_*.py")}
    assert numbered <= set(quoted_rows())


@pytest.mark.parametrize("number", sorted(quoted_rows()))
def test_the_faults_table_holds_the_row_its_test_quotes(number: int) -> None:
    table = {int(match.group(1)): line for line in PAGES["faults.md"].splitlines()
             if (match := FAULT_ROW.match(line))}
    quoted = quoted_rows()[number]
    # the docs' row adds a last column naming the test file; the rest is the quoted row
    assert " ".join(table[number].split()).startswith(" ".join(quoted.split()))


# --- the README as a front door, and the links between pages ---------------------------------


def test_the_readme_is_a_front_door_under_200_lines() -> None:
    assert len(README.splitlines()) < 200


def test_the_readme_names_the_test_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec ./scripts/test" in ci
    assert "./scripts/test" in README


def test_the_readme_maps_every_package_and_top_level_module_under_src() -> None:
    top = ROOT / "src" / "mirrorgate"
    names = [f"{path.parent.name}/" for path in top.glob("*/__init__.py")]
    names += [path.name for path in top.glob("*.py") if path.name != "__init__.py"]
    assert sorted(name for name in names if f"`{name}`" not in README) == []


@pytest.mark.parametrize("origin", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda path: path.name)
def test_every_link_lands_on_a_file_and_a_section_that_exist(origin: Path) -> None:
    broken = []
    for target, anchor in links(origin, origin.read_text(encoding="utf-8")):
        if not target.exists():
            if target.name not in ARRIVING:
                broken.append(f"{target.relative_to(ROOT)} (missing)")
            continue
        if anchor and target.suffix == ".md" and anchor not in anchors(
                target.read_text(encoding="utf-8")):
            broken.append(f"{target.relative_to(ROOT)}#{anchor}")
    assert broken == []


MODULE = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py|[a-z_]+/)`")


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"])
def test_every_module_the_map_and_the_architecture_name_is_in_the_tree(page: str) -> None:
    """The README's map and architecture.md name modules by their path under src/mirrorgate/;
    a module moved or renamed without them fails here."""
    text = FENCE.sub("", (ROOT / page).read_text(encoding="utf-8"))
    named = set(MODULE.findall(text)) - {"tests/", "docs/", "src/"}
    missing = sorted(path for path in named
                     if not (ROOT / "src" / "mirrorgate" / path).exists())
    assert missing == []


def test_operations_lists_every_metric_and_every_log_event_in_its_tables() -> None:
    """An alert is written from operations.md: its two tables hold every name, so no one has
    to search the other pages for one."""
    page = PAGES["operations.md"]
    metrics = page[page.index("| metric | labels | meaning |"):page.index("\n## ", page.index(
        "| metric | labels | meaning |"))]
    events = page[page.index("| event | meaning |"):page.index("\n## ", page.index(
        "| event | meaning |"))]
    names = {metric.name for metric in Metrics().registry.collect()}
    missing = sorted(name for name in names if f"`{name}" not in metrics)
    assert missing == [], "add a row for each to the Metrics table of docs/operations.md"
    missing = sorted(event for event in logged_events() if f"`{event}`" not in events)
    assert missing == [], "add a row for each to the Log events table of docs/operations.md"


def test_the_rules_table_in_the_docs_is_the_one_the_rules_render() -> None:
    # the order, the names and what each rule denies come from `rules.table.RULES` alone
    assert rules_table() in PAGES["serving.md"], (
        "docs/serving.md's rules table is stale: paste `mirrorgate.rules.rules_table()`")
