"""The suite's shared private Verdaccio keeps tests apart: a name belongs to the test that
published it there, so no test's outcome can depend on which other test ran first."""

from __future__ import annotations

import pytest

from tests.serve.rig import SharedPrivate, requested_names
from tests.servers.packages import make_version
from tests.servers.verdaccio import Verdaccio


def test_publishing_a_name_another_test_published_fails_naming_that_test(
    shared_verdaccio: Verdaccio,
) -> None:
    view = SharedPrivate(shared_verdaccio, {"taken-name": "test_other.py::test_first"}, "me")
    with pytest.raises(AssertionError, match=r"'taken-name' is already published .* "
                                             r"test_other.py::test_first"):
        view.publish(make_version("taken-name", "1.0.0"))
    assert shared_verdaccio.packument("taken-name") is None  # refused before it was sent


def test_asking_for_another_tests_private_name_as_a_public_one_fails(
    shared_verdaccio: Verdaccio,
) -> None:
    claims = {"merge-two": "test_other.py::test_first", "mine": "me"}
    view = SharedPrivate(shared_verdaccio, claims, "me")
    view.check_unclaimed(["mine", "left-pad"])
    with pytest.raises(AssertionError, match=r"'merge-two' is published .* by test_other"):
        view.check_unclaimed(["left-pad", "merge-two"])


def test_names_are_read_from_packument_and_tarball_paths_in_every_spelling() -> None:
    assert requested_names(["/left-pad", "/left-pad/-/left-pad-1.0.0.tgz", "/@s%2fa",
                            "/@s%2Fb/-/b-1.0.0.tgz", "/@s/c", "/-/ping"]) == {
        "left-pad", "@s/a", "@s/b", "@s/c"}
