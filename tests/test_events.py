"""The status page's ring of recent events: bounded per kind, newest first, an hour of outcomes.

The attack this stops: a flood (a client pulling thousands of denied versions, an upstream
failing on every call) growing the process's memory without bound, or pushing the one tamper
event an operator must see out of the page.
"""

from __future__ import annotations

from mirrorgate.events import Recent
from tests.clock import ManualClock


def test_each_kind_keeps_at_most_its_capacity_newest_first() -> None:
    recent = Recent(capacity=3)

    for index in range(10):
        recent.denied(f"pkg@{index}.0.0", "deny-list", "listed")

    assert [e.subject for e in recent.latest("denied")] == ["pkg@9.0.0", "pkg@8.0.0",
                                                            "pkg@7.0.0"]


def test_a_flood_of_one_kind_does_not_push_out_another() -> None:
    recent = Recent(capacity=5)
    recent.tampered("evil@1.0.0", "digest mismatch")

    for index in range(1000):
        recent.job(f"pkg@{index}.0.0", "published")

    assert [e.subject for e in recent.latest("tampered")] == ["evil@1.0.0"]


def test_the_last_failure_of_each_upstream_is_kept() -> None:
    recent = Recent()
    recent.upstream_failed("public", "timeout", "first")
    recent.upstream_failed("private", "unreachable", "down")
    recent.upstream_failed("public", "status", "answered 500")

    failures = recent.last_failures()

    assert failures["public"].detail == "status: answered 500"
    assert failures["private"].detail == "unreachable: down"


def test_job_outcomes_are_counted_over_the_last_hour_only() -> None:
    clock = ManualClock()
    recent = Recent(clock=clock)
    recent.job("a@1.0.0", "published")
    clock.advance(30 * 60)
    recent.job("b@1.0.0", "published")
    recent.job("c@1.0.0", "tampered")

    assert recent.outcomes_last_hour() == {"published": 2, "tampered": 1}
    clock.advance(31 * 60)
    assert recent.outcomes_last_hour() == {"published": 1, "tampered": 1}
    clock.advance(60 * 60)
    assert recent.outcomes_last_hour() == {}


def test_a_long_detail_is_cut() -> None:
    recent = Recent()

    recent.upstream_failed("public", "invalid", "x" * 10_000)

    assert len(recent.latest("upstream_failed")[0].detail) <= 500

