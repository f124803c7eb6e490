"""A job that fails transiently is retried promptly once, then with a growing delay."""

from __future__ import annotations

import pytest

from mirrorgate.worker.loop import MAX_RETRY_DELAY, retry_delay


@pytest.mark.parametrize(
    ("deliveries", "visibility", "delay"),
    [(None, 60, 0), (1, 60, 0), (2, 60, 60), (3, 60, 120), (4, 60, 240), (5, 60, 480),
     (6, 60, MAX_RETRY_DELAY), (3, 10, 20)],
)
def test_the_first_failure_is_retried_at_once_and_later_ones_back_off(
        deliveries: int | None, visibility: int, delay: int) -> None:
    assert retry_delay(deliveries, visibility) == delay


def test_five_deliveries_span_minutes_not_seconds() -> None:
    waited = sum(retry_delay(n, 60) for n in range(1, 5))
    assert waited >= 7 * 60
