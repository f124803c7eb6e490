"""Only URLs on the configured upstream's own origin are ever fetched."""

from __future__ import annotations

import pytest

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
