"""The relay benches' switches still reach what they switch.

A bench flips a mode by patching a part of mirrorgate (the relay's verifier, the release
judge's memory, the kept readings). The fault it guards: a part renamed or moved, and the
bench, run by hand and seldom, stops at its first round (`tarball_relay` patched
`serve.tarballs._verifier` for months after the gate took the verifier over), or worse, a
switch that patches nothing measures one mode twice.
"""

from __future__ import annotations

import pytest

from bench import release_relay, tarball_relay
from mirrorgate.gate.admission import Admission
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.npm.contents import KeptReadings
from mirrorgate.serve import relayhash


@pytest.mark.parametrize("name", tarball_relay.MODES)
def test_every_mode_of_the_verification_bench_switches_what_it_names(name: str) -> None:
    verifier, spare = Admission.verifier, relayhash._spare_cpu
    with tarball_relay.mode(name):
        # unverified: the relay gets no verifier; on-loop: no spare CPU to hash on
        assert (Admission.verifier is not verifier) == (name == "unverified")
        assert (relayhash._spare_cpu is not spare) == (name == "on-loop")
    assert Admission.verifier is verifier
    assert relayhash._spare_cpu is spare


@pytest.mark.parametrize("name", release_relay.MODES)
def test_every_mode_of_the_signals_bench_switches_what_it_names(name: str) -> None:
    applies, remembered, kept = ReleaseJudge.applies, ReleaseJudge.remembered, KeptReadings.get
    with release_relay.mode(name):
        assert (ReleaseJudge.applies is not applies) == (name == "off")
        assert (ReleaseJudge.remembered is not remembered) == (name != "off")
        assert (KeptReadings.get is not kept) == (name == "on-cold")
    assert (ReleaseJudge.applies, ReleaseJudge.remembered, KeptReadings.get) == (
        applies, remembered, kept)
