"""What a person meets in the first hour, with the real npm client: a refusal that says the way
through, and an install that cannot work offline saying why.

Each test asserts what npm prints, since that is all a person sees: the version asked for, a
few others and how many more, when a version too young becomes installable, the version to use
instead and who grants an exception; and, with the public registry gone, that the version was
never mirrored and the command that would have mirrored it.
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorgate.access.tokens import token_line
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.processes import wait_for

CONTACT = "#npm-gate on chat"
EIGHT_DAYS = '[age]\nminimum = "8d"\n'


def printed(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def rules_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rules.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_npm_prints_when_a_young_version_becomes_installable_what_to_use_and_who_to_ask(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    # the report: `npm install @types/node@26.6.11` under an 8-day minimum, about 150 versions
    # younger than that, the nearest admitted 26.6.7
    now = datetime.now(UTC).replace(microsecond=0)
    young = [make_version("@types/node", f"26.6.{patch}", published=now - timedelta(days=patch - 7))
             for patch in range(8, 12)]
    young += [make_version("@types/node", f"27.0.{patch}",
                           published=now - timedelta(hours=patch + 1)) for patch in range(146)]
    public_registry.add(make_package("@types/node", [
        make_version("@types/node", "26.6.7", published=now - timedelta(days=30)), *young]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_RULES_FILE": rules_file(tmp_path, EIGHT_DAYS),
                                 "MIRRORGATE_OPERATOR_CONTACT": CONTACT})
    npm_client.write_project({})

    done = npm_client.install("@types/node@26.6.11", registry=proxy.registry_url)

    said = printed(done)
    assert done.returncode != 0
    assert "npm error code E403" in said
    assert "Could not download @types/node@26.6.11 due to policy violations:" in said
    assert "mirrorgate's admission rules withhold 150 versions of @types/node:" in said
    assert "and 147 more (minimum-age 147)" in said
    assert "newest admitted: 26.6.7" in said
    assert (f"for an exception ask {CONTACT}: mirrorgate allow @types/node@VERSION --why ... "
            "--until DATE admits it until that date") in said
    assert said.count("(minimum-age)") == 3  # a few versions by name, the rest counted
    assert len(said.splitlines()) < 20, said
    # what was asked for, and when it comes of age, straight from the tarball's 403
    exact = npm_client.run("view", "@types/node@26.6.11", "version",
                           registry=proxy.registry_url)
    assert exact.returncode != 0
    answer = proxy.get("npm/@types%2fnode/26.6.11")
    assert answer.status == 403
    becomes = (now - timedelta(days=4) + timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"installable from {becomes}; nearest admitted: 26.6.7" in answer.json()["error"]


def test_npm_prints_installable_from_for_a_locked_version_still_too_young(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    public_registry.add(make_package("fresh-lib", [
        make_version("fresh-lib", "1.0.0", published=now - timedelta(days=40)),
        make_version("fresh-lib", "1.1.0", published=now - timedelta(days=3))]))
    open_gate = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                     "MIRRORGATE_RULES_FILE": rules_file(tmp_path, "[age]\n"
                                                                         'minimum = "0"\n')})
    npm_client.write_project({"fresh-lib": "1.1.0"})
    assert npm_client.install(registry=open_gate.registry_url).returncode == 0
    assert open_gate.terminate() == 0
    strict = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                  "MIRRORGATE_RULES_FILE": rules_file(tmp_path, EIGHT_DAYS),
                                  "MIRRORGATE_OPERATOR_CONTACT": CONTACT,
                                  "MIRRORGATE_LISTEN": open_gate.env["MIRRORGATE_LISTEN"]})
    npm_client.clear_cache()

    done = npm_client.ci(registry=strict.registry_url)

    becomes = (now + timedelta(days=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert done.returncode != 0
    assert ("mirrorgate denied fresh-lib@1.1.0 by its minimum-age rule: published "
            in printed(done)), printed(done)
    assert (f"installable from {becomes}; nearest admitted: 1.0.0; for an exception ask "
            f"{CONTACT}: mirrorgate allow fresh-lib@1.1.0 --why") in printed(done)


def test_npm_says_a_version_was_never_mirrored_and_how_to_mirror_it_when_public_is_gone(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, npm_client: NpmClient,
) -> None:
    # npm served `vary` from its own cache at the first install, so mirrorgate never saw it;
    # with the public registry gone, a fresh machine asks mirrorgate for it
    public_registry.add(make_package("vary", ["1.1.2"]), make_package("kept", ["1.0.0"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    npm_client.write_project({"kept": "1.0.0"})
    assert npm_client.install(registry=proxy.registry_url).returncode == 0
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=30)
    public_registry.stop()
    npm_client.clear_cache()

    done = npm_client.install("vary@1.1.2", registry=proxy.registry_url)

    said = printed(done)
    assert done.returncode != 0
    assert "vary is not mirrored, and the public upstream failed for vary" in said, said
    assert "run mirrorgate prewarm LOCKFILE" in said
    assert npm_client.install("kept@1.0.0", registry=proxy.registry_url).returncode == 0


def test_the_start_up_line_names_the_registry_url_and_the_status_page_and_root_redirects(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(token_line("ci", "mgc_first-hour-7d1e"), encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens),
                                 "MIRRORGATE_PUBLIC_URL": "http://npm.internal:8080/"})

    [started] = proxy.events("started")
    assert started["registry"] == "http://npm.internal:8080/npm/"
    assert started["status_page"] == "http://npm.internal:8080/ui/"
    # a person typing the host name into a browser: pointed at the page (then its login),
    # even with client tokens on, never a JSON 404 or 401
    host, port = proxy.env["MIRRORGATE_LISTEN"].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", "/")
    answer = connection.getresponse()
    assert (answer.status, answer.getheader("Location")) == (303, "/ui/")
    connection.close()


def test_a_version_npm_took_from_its_cache_is_not_mirrored_and_ci_says_so_with_public_gone(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    # The report's path: 1.1.1 was mirrored through mirrorgate by someone; a developer whose
    # npm cache already held 1.1.2 (from the public registry) installed it through mirrorgate
    # and npm never asked for the tarball; CI then runs `npm ci` with the public registry gone.
    public_registry.add(make_package("vary", ["1.1.1", "1.1.2"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url})
    colleague = NpmClient(tmp_path / "colleague")
    colleague.write_project({"vary": "1.1.1"})
    assert colleague.install(registry=proxy.registry_url).returncode == 0
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") == 1,
             timeout=30)
    npm_client.write_project({"vary": "1.1.2"})
    assert npm_client.install(registry=public_registry.url).returncode == 0  # the warm cache
    (npm_client.project / "package-lock.json").unlink()
    assert npm_client.install(registry=proxy.registry_url).returncode == 0
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 1  # 1.1.2 came from the cache
    public_registry.stop()
    ci = NpmClient(tmp_path / "ci")
    ci.write_project({"vary": "1.1.2"})
    shutil.copy(npm_client.project / "package-lock.json", ci.project / "package-lock.json")

    done = ci.ci(registry=proxy.registry_url)

    said = printed(done)
    assert done.returncode != 0
    assert ("vary@1.1.2 is not mirrored, and the public upstream failed for vary") in said, said
    assert "run mirrorgate prewarm LOCKFILE" in said
