"""What mirrorgate refuses to publish, each refusal stated as the attack or mistake it stops.

Every case ends by looking at what Verdaccio stored (it checks nothing itself: a wrong
integrity would be stored and served), so "refused" means nothing reached the registry.
Forged documents are sent by hand, as a client other than npm could send them.
"""

from __future__ import annotations

import json
import random
import select
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mirrorgate.access.tokens import new_token
from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import Stack, forged_document, login, npm_package, start_stack
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package
from tests.servers.processes import http_request, wait_for
from tests.servers.verdaccio import Verdaccio, escape_name
from tests.servers.webhook import SECRET, WebhookReceiver

WIDGET = make_package("@acme/widget", ["1.0.0"]).version("1.0.0")


def nothing_stored(verdaccio: Verdaccio, name: str) -> bool:
    return verdaccio.packument(name) is None and not any(
        verdaccio.storage.joinpath(*name.split("/")).glob("*.tgz"))


def refusal(reply_body: bytes) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(reply_body)
    return document


def test_a_publish_without_a_token_or_with_an_unknown_one_is_refused(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    # the attack: anyone who can reach the port publishing with mirrorgate's own credential
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    unknown = new_token()
    guard.watch(stack.proxy, unknown)
    login(npm_client, stack, unknown)

    anonymous = http_request("PUT", stack.proxy.registry_url + escape_name("@acme/widget"),
                             body=forged_document(WIDGET),
                             headers={"Content-Type": "application/json"})
    done = npm_client.run("publish", registry=stack.proxy.registry_url,
                          cwd=npm_package(tmp_path, "@acme/widget", "1.0.0"))

    assert anonymous.status == 401
    assert "needs a client token" in refusal(anonymous.body)["error"]
    assert done.returncode != 0
    assert "E401" in done.stderr
    assert nothing_stored(verdaccio, "@acme/widget")


def test_a_read_only_token_can_neither_publish_nor_deprecate(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    # the attack: a CI token (read-only by design) used to push a build as a release
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    verdaccio.publish(WIDGET)  # there already, so deprecate has something to change
    login(npm_client, stack, stack.reader)

    published = npm_client.run("publish", registry=stack.proxy.registry_url,
                               cwd=npm_package(tmp_path, "@acme/widget", "1.1.0"))
    deprecated = npm_client.run("deprecate", "@acme/widget@1.0.0", "gone",
                                registry=stack.proxy.registry_url)
    guard.seen(published.stderr + deprecated.stderr, "npm's output")

    assert published.returncode != 0
    assert "E403" in published.stderr
    assert "the client ci may not publish" in published.stderr
    assert deprecated.returncode != 0
    assert "E403" in deprecated.stderr
    assert verdaccio.versions("@acme/widget") == ["1.0.0"]
    assert "deprecated" not in (verdaccio.packument("@acme/widget") or {})["versions"]["1.0.0"]
    assert stack.publishes("refused", client="ci") == 1
    assert stack.publishes("refused", "read-for-change", client="ci") == 1
    assert {line["reason"] for line in stack.proxy.events("publish_refused")} == {
        "not a publisher"}


def test_a_name_outside_publish_names_is_refused(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    login(npm_client, stack, stack.publisher)

    done = npm_client.run("publish", registry=stack.proxy.registry_url,
                          cwd=npm_package(tmp_path, "widget-tools", "1.0.0"))

    assert done.returncode != 0
    assert "E403" in done.stderr
    assert "[publish] names in the rules file does not cover it" in done.stderr
    assert nothing_stored(verdaccio, "widget-tools")


def test_a_name_that_exists_publicly_is_refused_unless_merge_public_names_it(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    # the attack: shadowing a public package (`acme-tools`, someone else's) with a private
    # one that every install through mirrorgate would then get instead
    public_registry.add(make_package("acme-tools", ["1.0.0"]),
                        make_package("acme-shared", ["1.0.0"]))
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    login(npm_client, stack, stack.publisher)

    shadowing = npm_client.run("publish", registry=stack.proxy.registry_url,
                               cwd=npm_package(tmp_path, "acme-tools", "2.0.0"))
    merged = npm_client.run("publish", registry=stack.proxy.registry_url,
                            cwd=npm_package(tmp_path, "acme-shared", "2.0.0"))
    # merged on purpose, but a private 1.0.0 would still shadow the public 1.0.0 (--force:
    # past npm's own check, which sees 1.0.0 in the merged packument)
    same_version = npm_client.run("publish", "--force", registry=stack.proxy.registry_url,
                                  cwd=npm_package(tmp_path / "again", "acme-shared", "1.0.0"))

    assert shadowing.returncode != 0
    assert "E403" in shadowing.stderr
    assert "acme-tools exists on the public registry and is not first-party" in shadowing.stderr
    assert nothing_stored(verdaccio, "acme-tools")
    assert merged.returncode == 0, merged.stderr  # [private] merge_public: on purpose
    assert "E409" in same_version.stderr
    assert verdaccio.versions("acme-shared") == ["2.0.0"]


def test_a_tarball_that_does_not_match_its_integrity_is_refused_and_nothing_is_stored(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    # the attack: a manifest declaring the reviewed build's digests, carrying other bytes
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    other = make_package("@acme/widget", ["1.0.0"], description="other bytes").version("1.0.0")

    reply = stack.put("@acme/widget", forged_document(WIDGET, tarball=other.tarball))

    assert reply.status == 400
    assert "does not match its declared sha512" in refusal(reply.body)["error"]
    assert nothing_stored(verdaccio, "@acme/widget")
    [line] = stack.proxy.events("publish_refused")
    assert (line["client"], line["package"], line["reason"]) == (
        "release-bot", "@acme/widget", "bad publish document")


def test_a_document_naming_another_package_than_the_url_is_refused(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    # the attack: a PUT to a name the client may publish, carrying another package
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    impostor = make_package("@acme/other", ["1.0.0"]).version("1.0.0")

    renamed = stack.put("@acme/widget", forged_document(impostor))
    relabelled = stack.put("@acme/widget", forged_document(WIDGET, name="@acme/other"))

    assert renamed.status == 400
    assert "the package the URL names" in refusal(renamed.body)["error"]
    assert relabelled.status == 400
    assert "is not @acme/widget, the package the URL names" in refusal(relabelled.body)["error"]
    assert nothing_stored(verdaccio, "@acme/widget")
    assert nothing_stored(verdaccio, "@acme/other")


def test_republishing_an_existing_version_is_refused_and_the_first_bytes_stay(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path)
    login(npm_client, stack, stack.publisher)
    first = npm_client.run("publish", registry=stack.proxy.registry_url,
                           cwd=npm_package(tmp_path / "a", "@acme/widget", "1.0.0"))
    assert first.returncode == 0, first.stderr
    stored = verdaccio.tarball("@acme/widget", "widget-1.0.0.tgz")
    changed = npm_package(tmp_path / "b", "@acme/widget", "1.0.0")
    (changed / "index.js").write_text("module.exports = 'changed';\n", encoding="utf-8")

    # --force: npm skips its own check and sends the PUT, so mirrorgate's is what refuses
    again = npm_client.run("publish", "--force", registry=stack.proxy.registry_url,
                           cwd=changed)

    assert again.returncode != 0
    assert "E409" in again.stderr
    assert "@acme/widget@1.0.0 is already published" in again.stderr
    assert verdaccio.tarball("@acme/widget", "widget-1.0.0.tgz") == stored


def chunked_upload(url: str, token: str, body: bytes, piece: int = 16 * 1024) -> tuple[str, int]:
    """PUT `body` chunked, a piece at a time, stopping as soon as the server answers; the final
    empty chunk is never sent, so the server cannot have seen the whole body. Returns the
    status line and the body bytes sent."""
    parts = urlsplit(url)
    head = (f"PUT {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(head)
        sent = 0
        for start in range(0, len(body), piece):
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered
            part = body[start:start + piece]
            try:
                sock.sendall(b"%x\r\n%b\r\n" % (len(part), part))
            except OSError:
                break  # the server closed the connection
            sent += len(part)
            time.sleep(0.01)
        answer = sock.recv(4096)
    return answer.split(b"\r\n", 1)[0].decode(), sent


def test_an_oversized_publish_is_refused_before_it_is_all_read(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path,
) -> None:
    limit = 64 * 1024
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path,
                        MIRRORGATE_MAX_PUBLISH_BYTES=str(limit))
    big = make_package("@acme/widget", ["1.0.0"],
                       files={"blob.bin": random.Random(18).randbytes(1 << 20)}).version("1.0.0")
    document = forged_document(big)
    assert len(document) > 10 * limit
    url = stack.proxy.registry_url + escape_name("@acme/widget")

    # declared too large: refused on the header, before a byte of the body is read
    declared = http_head_only(url, stack.publisher, len(document))
    # not declared (chunked): refused as the bound is crossed, long before the end
    status, sent = chunked_upload(url, stack.publisher, document)

    assert declared.startswith("HTTP/1.1 413")
    assert status.startswith("HTTP/1.1 413"), status
    assert sent < len(document)
    assert nothing_stored(verdaccio, "@acme/widget")
    lines = stack.proxy.events("publish_refused")
    assert [line["status"] for line in lines] == [413, 413]
    assert "MIRRORGATE_MAX_PUBLISH_BYTES" in refusal(
        http_body_of_413(url, stack.publisher, len(document)))["error"]


def http_head_only(url: str, token: str, length: int) -> str:
    """Send a PUT's head declaring `length` bytes and no body at all; the status line."""
    parts = urlsplit(url)
    head = (f"PUT {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(head)
        return sock.recv(4096).split(b"\r\n", 1)[0].decode()


def http_body_of_413(url: str, token: str, length: int) -> bytes:
    parts = urlsplit(url)
    head = (f"PUT {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n\r\n", 1)[1]


class RefusingVerdaccio(Verdaccio):
    """A Verdaccio where mirrorgate's user may read but not publish."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        for rule in config["packages"].values():
            rule["publish"] = "release-managers"
        return config


def test_an_upstream_refusal_is_passed_on_with_its_status_and_reason(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    secret_dir: SecretDir, tmp_path: Path,
) -> None:
    with serving(RefusingVerdaccio(tmp_path / "verdaccio"), "Verdaccio") as refusing:
        stack: Stack = start_stack(guarded, guard, public_registry, refusing, secret_dir,
                                   tmp_path)

        reply = stack.put("@acme/widget", forged_document(WIDGET))
        guard.seen(reply)

        assert reply.status == 403
        said = refusal(reply.body)
        assert said["upstream"] == "private"
        assert said["upstream_status"] == 403
        assert "not allowed to publish" in said["error"]
        assert nothing_stored(refusing, "@acme/widget")
        assert stack.publishes("upstream_refused", client="release-bot") == 1


def test_a_publish_carrying_mirrorgates_own_mark_is_refused_and_a_security_team_told(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, webhook: WebhookReceiver,
) -> None:
    # the attack: a first-party build published with a forged `_mirrorgate` mark (its own
    # digest, so the mark checks out) counts as a mirrored public copy, the name stops being
    # first-party, and an impostor's public `acme-lib@9.9.9` is then merged into it
    stack = start_stack(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path,
                        MIRRORGATE_NOTIFY_URL=webhook.hook_url, MIRRORGATE_NOTIFY_SECRET=SECRET)
    build = make_package("acme-lib", ["1.0.0"]).version("1.0.0")
    manifest = build.document("http://127.0.0.1:9/npm/")
    manifest["_mirrorgate"] = {"v": 1, "source": "public", "published": "2020-01-01T00:00:00Z",
                               "integrity": build.integrity}
    document = json.loads(forged_document(build))
    document["versions"] = {"1.0.0": manifest}

    reply = stack.put("acme-lib", json.dumps(document).encode())
    stored_after_refusal = not nothing_stored(verdaccio, "acme-lib")
    honest = stack.put("acme-lib", forged_document(build))  # the same build, unmarked
    public_registry.add(make_package("acme-lib", ["9.9.9"]))
    served = http_request("GET", stack.proxy.registry_url + "acme-lib",
                          headers={"Authorization": f"Bearer {stack.reader}"})

    assert reply.status == 400
    assert "_mirrorgate" in refusal(reply.body)["error"]
    assert not stored_after_refusal
    assert honest.status == 201
    assert list(json.loads(served.body)["versions"]) == ["1.0.0"]  # first-party: no impostor
    [told] = wait_for(lambda: webhook.of_type("dev.mirrorgate.forged-mark"), timeout=10,
                      message="the forged-mark notification")
    assert told.signature_valid
    assert told.event["subject"] == "acme-lib@1.0.0"
    assert told.event["data"]["client"] == "release-bot"
