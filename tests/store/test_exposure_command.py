"""`mirrorgate exposure` answers from the pull log on both stores, as the real command.

The incident it answers: `axios@1.14.1` was live for about three hours; which builds installed
it, and when? The log here holds what a proxy writes (`gate.pulls.log`): two CI clients and a
laptop pulling axios versions around the bad one, and a pull refused by a rule. The command
must name the clients that got the bad bytes, and only them, exit 1 when anyone did, 0 when
no one did, and 2 on a question it cannot ask.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorgate.store import Pull, RefusalRow
from tests.advisories.records import malware, record, semver_range, write_zip
from tests.servers.processes import mirrorgate_argv
from tests.store.conftest import Place

T0 = datetime(2026, 3, 31, 0, 21, tzinfo=UTC)
BAD = "sha512-" + "b" * 86 + "=="
GOOD = "sha512-" + "g" * 86 + "=="
PULLS = [
    Pull("payments-ci (acme/payments-api, branch main)", "axios", "1.14.0", GOOD, "mirror", T0,
         "r1"),
    Pull("payments-ci (acme/payments-api, branch main)", "axios", "1.14.1", BAD, "public",
         T0 + timedelta(minutes=40), "r2"),
    Pull("payments-ci (acme/payments-api, branch main)", "axios", "1.14.1", BAD, "mirror",
         T0 + timedelta(minutes=95), "r3"),
    Pull("web-ci", "axios", "1.14.1", BAD, "mirror", T0 + timedelta(hours=2), "r4"),
    Pull("laptop", "axios", "1.14.0", GOOD, "mirror", T0 + timedelta(hours=2), "r5"),
    Pull("laptop", "@acme/ui", "3.0.0", GOOD, "mirror", T0 + timedelta(hours=5), "r7"),
]
REFUSED = (T0 + timedelta(hours=4)).timestamp()
REFUSALS: list[RefusalRow] = [  # the laptop, refused the bad version by the advisory rule
    ("laptop", "axios", "1.14.1", "advisories", REFUSED - REFUSED % 3600, "", REFUSED, REFUSED,
     1, "r6", None)]


def exposure(place: Place, *args: str, **more: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **more}
    if place.kind == "sqlite":
        env["MIRRORGATE_DATA_DIR"] = os.path.dirname(place.spec.removeprefix("sqlite:"))
    else:
        env["MIRRORGATE_DATABASE_URL"] = place.spec
    return subprocess.run([*mirrorgate_argv(), "exposure", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


async def filled(place: Place) -> None:
    store = await place.open()
    try:
        await store.append_pulls([p.row() for p in PULLS])
        await store.add_refusals(REFUSALS)
    finally:
        await store.close()


async def test_a_version_names_every_client_that_pulled_it_with_first_last_and_count(
        place: Place) -> None:
    await filled(place)
    done = exposure(place, "axios@1.14.1", "--json")

    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["store"] == place.kind
    assert answer["clients"] == ["payments-ci (acme/payments-api, branch main)", "web-ci"]
    ci, web = answer["pulled"]
    assert (ci["version"], ci["first"], ci["last"], ci["pulls"], ci["sources"]) == (
        "1.14.1", "2026-03-31T01:01:00Z", "2026-03-31T01:56:00Z", 2, ["mirror", "public"])
    assert ci["integrity"] == [BAD]
    assert (web["client"], web["pulls"]) == ("web-ci", 1)
    # the laptop was refused the bad version: listed apart, not exposed
    assert [(r["client"], r["sources"]) for r in answer["refused"]] == [
        ("laptop", ["refused:advisories"])]

    table = exposure(place, "axios@1.14.1")
    assert table.returncode == 1
    assert "axios@1.14.1 was pulled by 2 clients: payments-ci" in table.stdout
    assert "web-ci" in table.stdout
    assert "2026-03-31T01:01:00Z" in table.stdout


async def test_a_range_and_since_select_and_nothing_pulled_exits_0(place: Place) -> None:
    await filled(place)
    ranged = json.loads(exposure(place, "axios@>=1.14.1 <1.14.2", "--json").stdout)
    assert ranged["clients"] == ["payments-ci (acme/payments-api, branch main)", "web-ci"]

    since = exposure(place, "--since", "2026-03-31T02:00Z", "--json")
    assert since.returncode == 1
    assert {(e["client"], e["name"], e["version"]) for e in json.loads(since.stdout)["pulled"]} \
        == {("web-ci", "axios", "1.14.1"), ("laptop", "axios", "1.14.0"),
            ("laptop", "@acme/ui", "3.0.0")}
    scoped = json.loads(exposure(place, "@acme/ui@3.0.0", "--json").stdout)
    assert scoped["clients"] == ["laptop"]

    nobody = exposure(place, "axios@1.14.2")
    assert nobody.returncode == 0, nobody.stderr
    assert "No client pulled axios@1.14.2" in nobody.stdout


async def test_a_question_that_cannot_be_asked_exits_2_saying_what_is_wrong(
        place: Place) -> None:
    await filled(place)
    cases = {("axios@>=1.x.3",): "neither a version nor a range",
             ("Not A Name@1.0.0",): "is not a package name",
             ("--since", "last tuesday"): "is not a date or time",
             (): "name what to look for"}
    for args, said in cases.items():
        done = exposure(place, *args)
        assert done.returncode == 2, (args, done.stdout)
        assert said in done.stderr, (args, done.stderr)


def test_a_data_dir_without_a_store_is_a_mistake_not_an_empty_log(tmp_path: Path) -> None:
    done = exposure(Place("sqlite", f"sqlite:{tmp_path / 'elsewhere' / 'state.sqlite3'}"),
                    "axios@1.14.1")
    assert done.returncode == 2
    assert "there is no state store at" in done.stderr


async def test_an_advisory_id_or_alias_asks_for_the_versions_it_names(
        place: Place, tmp_path: Path) -> None:
    await filled(place)
    export = write_zip(tmp_path / "osv-npm.zip", [
        record("GHSA-axi0-0000-0001", "axios", aliases=["CVE-2026-1414"],
               ranges=[semver_range(("introduced", "1.14.1"), ("fixed", "1.14.2"))]),
        malware("MAL-2026-1234", "@acme/ui", ["3.0.0"])])
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[advisories]\nsource = "{export}"\n', encoding="utf-8")
    env = {"MIRRORGATE_RULES_FILE": str(rules)}

    by_alias = exposure(place, "CVE-2026-1414", "--json", **env)
    assert by_alias.returncode == 1, by_alias.stderr
    assert json.loads(by_alias.stdout)["clients"] == [
        "payments-ci (acme/payments-api, branch main)", "web-ci"]
    malicious = json.loads(exposure(place, "MAL-2026-1234", "--json", **env).stdout)
    assert malicious["question"] == "MAL-2026-1234 (@acme/ui)"
    assert malicious["clients"] == ["laptop"]
    unknown = exposure(place, "MAL-2026-9999", **env)
    assert unknown.returncode == 2
    assert "the advisory index does not know MAL-2026-9999" in unknown.stderr
