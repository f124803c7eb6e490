"""Only URLs on the configured upstream's own origin are ever fetched."""

from __future__ import annotations

import pytest

from mirrorgate.npm import origins
from mirrorgate.npm.origins import Origin, OriginRefusal, check_on_origin

UPSTREAM = Origin.of("http://127.0.0.1:4873/")


def test_a_url_on_the_upstream_origin_is_allowed() -> None:
    check_on_origin("http://127.0.0.1:4873/left-pad/-/left-pad-1.0.0.tgz", UPSTREAM)
    check_on_origin("https://registry.example.com/x/-/x-1.tgz",
                    Origin.of("https://registry.example.com:443/npm/"))


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:4874/x/-/x-1.0.0.tgz", "internal-address"),
        ("http://10.0.0.1/x.tgz", "internal-address"),
        ("http://169.254.169.254/latest/meta-data/", "internal-address"),
        ("http://[::1]:4873/x.tgz", "internal-address"),
        ("http://0177.0.0.1:4873/x.tgz", "internal-address"),
        ("http://0x7f.0.0.1:4873/x.tgz", "internal-address"),
        ("http://2130706433:4873/x.tgz", "internal-address"),
        ("http://localhost:4873/x.tgz", "off-origin"),
        ("http://evil.example.com/x.tgz", "off-origin"),
        ("https://127.0.0.1:4873/x.tgz", "internal-address"),
        ("http://127.0.0.1:4873@evil.example.com/x.tgz", "credentials"),
        ("file:///etc/passwd", "scheme"),
        ("ftp://127.0.0.1:4873/x.tgz", "scheme"),
        ("gopher://127.0.0.1:4873/", "scheme"),
        ("http://127.0.0.1:99999/x.tgz", "malformed"),
    ],
)
def test_a_url_anywhere_else_is_refused_with_its_kind(url: str, kind: str) -> None:
    with pytest.raises(OriginRefusal) as refused:
        check_on_origin(url, UPSTREAM)
    assert refused.value.kind == kind



def _verdict(url: str, origin: Origin) -> str | None:
    try:
        check_on_origin(url, origin)
    except OriginRefusal as refusal:
        return refusal.kind
    return None


@pytest.mark.parametrize("base", ["http://127.0.0.1:4873/", "https://registry.example.com/",
                                  "http://registry.example.com:80/npm/"])
@pytest.mark.parametrize("tail", [
    "x/-/x-1.0.0.tgz", "", "@s%2fx/-/x-1.tgz", "x?y=1#z", "x\n/y.tgz", "@evil.example/x.tgz",
    "/evil.example/x.tgz",
])
def test_a_url_beginning_with_the_origins_authority_is_judged_as_its_parse_judges_it(
        base: str, tail: str, monkeypatch: pytest.MonkeyPatch) -> None:
    origin = Origin.of(base)
    scheme, _, authority = base.split("/", 3)[:3]
    urls = [f"{scheme}//{authority}/{tail}", f"{scheme}//{authority.upper()}/{tail}",
            f"{scheme}//{authority}@evil.example.com/{tail}", f"{scheme}//{authority}:1/{tail}",
            f"{scheme}//{authority}.evil.example.com/{tail}", f"{scheme}//{authority}\\@x/"]
    fast = [_verdict(url, origin) for url in urls]
    assert fast[0] is None
    monkeypatch.setattr(origins, "_prefixes", lambda _origin: ())  # every URL parsed
    assert [_verdict(url, origin) for url in urls] == fast
