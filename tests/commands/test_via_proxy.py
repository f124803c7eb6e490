"""What `--proxy` reads from a packument the proxy renders: a denied version's rule and reason,
and a mirrored version told by its mark, on documents built by the proxy's own gate."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from mirrorgate.commands.via_proxy import ProxyView, registry_url
from mirrorgate.gate import gate
from mirrorgate.npm.names import parse_name
from mirrorgate.npm.origins import Origin
from mirrorgate.rules import parse_rules
from tests.servers.packages import make_package

PUBLIC = "http://127.0.0.1:9/"


def served(deny: str, count: int) -> ProxyView:
    package = make_package("many", [f"1.0.{n}" for n in range(count)])
    rules = parse_rules(f'[deny]\npackages = ["{deny}"]\n', "rules.toml")
    gated = gate(parse_name("many"), None, package.packument(PUBLIC), rules=rules,
                 now=datetime.now(UTC), origin=Origin.of(PUBLIC))
    return ProxyView(orjson.loads(gated.render(False, "http://proxy.example/")))


def test_the_reason_the_proxy_gives_for_each_denied_version_is_read_back() -> None:
    view = served("many@1.0.3", 5)

    assert set(view.denied) == {"1.0.3"}
    assert "1.0.3" not in view.versions
    assert view.reason("1.0.3") == ('deny-list (many@1.0.3 matches the deny list entry '
                                    '"many@1.0.3")')


def test_every_denied_version_has_its_reason_past_the_twenty_the_message_details() -> None:
    # the message names a few versions and counts the rest; the fields carry every reason
    view = served("many", 25)

    assert len(view.denied) == 25
    assert "- and 22 more (deny-list 22)" in view.message
    assert all("matches the deny list" in view.reason(v) for v in view.denied)
    assert view.reason("1.0.0") == 'deny-list (many@1.0.0 matches the deny list entry "many")'


def test_the_proxy_url_is_taken_from_its_root_or_its_registry_url() -> None:
    assert registry_url("https://npm.example.com") == "https://npm.example.com/npm/"
    assert registry_url("https://npm.example.com/npm/") == "https://npm.example.com/npm/"
