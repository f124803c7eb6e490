"""Row 34 of the faults table: the public upstream takes no connection (a firewall drops
its packets).

> | 34 | the public upstream takes no connection (a firewall that drops packets), while `npm
> install` asks for 40 names the private upstream holds | the install passes; three calls wait
> out the timeout, then public is held down (`upstream_down`): the other names' calls are
> answered at once (`mirrorgate_upstream_failures_total{reason="down"}`), not each after the
> timeout |

What it stops: every fill asks public beside private, so each name of an install waited out
`MIRRORGATE_UPSTREAM_TIMEOUT` for public's half of its packument, and an install from the mirror
with public gone dark took the timeout a name (these 40 took 2 min 05 s at 3 s with the hold
switched off: about one after another). The real `mirrorgate serve` over Verdaccio and the
real npm client; the dark public registry is a loopback port whose listener's queue is held
full, so the kernel drops every other SYN as such a firewall does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.guarded import GuardedFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_version
from tests.servers.ports import DarkPort
from tests.servers.verdaccio import Verdaccio

NAMES = [f"inhouse-lib-{index:02d}" for index in range(40)]
TIMEOUT = 3


@pytest.fixture
def dark_url() -> Iterator[str]:
    with DarkPort() as port:
        yield port.url


def test_an_install_from_the_mirror_does_not_wait_out_a_dark_public_registry_name_by_name(
    guarded: GuardedFactory, dark_url: str, verdaccio: Verdaccio, npm_client: NpmClient,
) -> None:
    for name in NAMES:
        verdaccio.publish(make_version(name, "1.0.0"))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": dark_url,
                              "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                              "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
                              "MIRRORGATE_UPSTREAM_TIMEOUT": str(TIMEOUT)})
    npm_client.write_project({name: "^1.0.0" for name in NAMES})

    done = npm_client.install(registry=proxy.registry_url, timeout=300)

    assert done.returncode == 0, done.stderr[-3000:]
    assert npm_client.installed() == dict.fromkeys(NAMES, "1.0.0")
    # the calls that waited out the timeout: those under way when it went down, not one a
    # name (the control, before this: all 40)
    waited = proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                          reason="timeout")
    skipped = proxy.metric("mirrorgate_upstream_failures_total", upstream="public",
                           reason="down")
    assert waited < len(NAMES) / 2, (waited, skipped)
    assert skipped >= len(NAMES) / 2
    down = proxy.events("upstream_down")
    assert [(line["upstream"], line["kind"]) for line in down] == [("public", "timeout")]
