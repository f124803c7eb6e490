"""The environment becomes one validated Settings, or a list of every problem."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import pytest

from mirrorgate.config import ConfigError, Secret, load_settings

BASE = {"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/"}


def no_npm() -> None:
    return None


def load(**env: str) -> object:
    return load_settings({**BASE, **env}, npm_registry=no_npm)


def problems(**env: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_settings({**BASE, **env}, npm_registry=no_npm)
    return caught.value.problems


def test_the_defaults_need_nothing_but_a_public_upstream() -> None:
    settings = load_settings(BASE, npm_registry=no_npm)
    assert settings.queue.provider == "memory"
    assert settings.queue.max_depth == 10_000
    assert settings.private_upstream.startswith("file://")
    assert settings.mirror_target == settings.private_upstream


def test_the_public_upstream_defaults_to_npms_registry() -> None:
    settings = load_settings({}, npm_registry=lambda: "http://127.0.0.1:7/")
    assert settings.public_upstream == "http://127.0.0.1:7/"


def test_without_any_public_upstream_start_up_is_refused_saying_what_to_set() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({}, npm_registry=no_npm)
    assert "MIRRORGATE_PUBLIC_UPSTREAM" in caught.value.problems[0]


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_a_bad_queue_depth_is_refused_naming_the_variable_and_an_example(value: str) -> None:
    [problem] = problems(MIRROR_QUEUE_MAX_DEPTH=value)
    assert problem.startswith("MIRROR_QUEUE_MAX_DEPTH:")
    assert "MIRROR_QUEUE_MAX_DEPTH=10000" in problem


def test_an_unknown_provider_is_refused_listing_the_valid_ones() -> None:
    [problem] = problems(MIRROR_QUEUE_PROVIDER="kafka")
    assert "memory, sqs, pubsub" in problem


def test_every_problem_is_reported_at_once() -> None:
    found = problems(MIRROR_QUEUE_MAX_DEPTH="x", MIRRORGATE_LISTEN="nope",
                     MIRRORGATE_CACHE_TTL="soon")
    assert len(found) == 3


def test_a_cloud_provider_needs_its_queue_names() -> None:
    assert "MIRROR_SQS_QUEUE_URL" in problems(MIRROR_QUEUE_PROVIDER="sqs")[0]
    found = problems(MIRROR_QUEUE_PROVIDER="pubsub", MIRROR_PUBSUB_TOPIC="mirror")
    assert any("projects/P/topics/NAME" in p for p in found)
    assert any("MIRROR_PUBSUB_SUBSCRIPTION" in p for p in found)


def test_the_token_is_read_from_a_file_and_never_shown(tmp_path: object) -> None:
    from pathlib import Path

    token_file = Path(str(tmp_path)) / "token"
    token_file.write_text("s3cr3t-token-value\n")
    settings = load_settings({**BASE, "MIRRORGATE_PRIVATE_TOKEN_FILE": str(token_file)},
                             npm_registry=no_npm)
    assert settings.private_token == Secret("s3cr3t-token-value")
    assert "s3cr3t" not in repr(settings)
    assert "s3cr3t" not in str(settings.summary())


def test_the_database_url_is_shown_without_its_password_and_a_bad_one_is_refused() -> None:
    url = "postgresql://mirrorgate:hunter2-db-pass@db.internal:5432/mirrorgate"
    settings = load_settings({**BASE, "MIRRORGATE_DATABASE_URL": url}, npm_registry=no_npm)
    assert settings.summary()["database_url"] == (
        "postgresql://mirrorgate:**redacted**@db.internal:5432/mirrorgate")
    assert "hunter2" not in repr(settings)
    assert any(secret.reveal() == "hunter2-db-pass" for secret in settings.secrets())
    with pytest.raises(ConfigError) as refused:
        load_settings({**BASE, "MIRRORGATE_DATABASE_URL": "mysql://u:hunter2@db/x"},
                      npm_registry=no_npm)
    assert "MIRRORGATE_DATABASE_URL: is not a PostgreSQL URL" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_credentials_in_an_upstream_url_are_refused() -> None:
    [problem] = problems(MIRRORGATE_PRIVATE_UPSTREAM="http://bob:pw@127.0.0.1:9/")
    assert "credentials in the URL" in problem


def test_a_misspelled_variable_is_named_with_the_closest_known_one() -> None:
    from mirrorgate.config import unknown_variables

    found = unknown_variables({"MIRRORGATE_RULE_FILE": "/etc/rules.toml",
                               "MIRROR_QUEUE_PROVIDR": "sqs", "MIRRORGATE_RULES_FILE": "x",
                               "MIRRORGATE_WHATEVER": "1", "HOME": "/root",
                               "AWS_REGION": "us-east-1"})

    assert [(u.name, u.suggestion) for u in found] == [
        ("MIRRORGATE_RULE_FILE", "MIRRORGATE_RULES_FILE"),
        ("MIRRORGATE_WHATEVER", None),
        ("MIRROR_QUEUE_PROVIDR", "MIRROR_QUEUE_PROVIDER"),
    ]
    assert "did you mean MIRRORGATE_RULES_FILE?" in found[0].warning()


def test_overload_bounds_have_defaults_sized_for_the_machine() -> None:
    settings = load_settings(BASE, npm_registry=no_npm)
    assert (settings.pool_fills, settings.pool_tarballs, settings.pool_worker) == (32, 64, 8)
    assert settings.max_in_flight == max(64, 64 * (os.cpu_count() or 1))
    assert (settings.head_timeout, settings.keepalive_timeout,
            settings.write_stall_timeout) == (10, 75, 30)


def test_a_worker_pool_smaller_than_the_worker_concurrency_is_refused() -> None:
    [problem] = problems(MIRRORGATE_WORKER_CONCURRENCY="16", MIRRORGATE_POOL_WORKER="4")
    assert problem.startswith("MIRRORGATE_POOL_WORKER: 4 connections cannot serve")
    assert "MIRRORGATE_POOL_WORKER=16" in problem


@pytest.mark.parametrize("name", ["MIRRORGATE_MAX_IN_FLIGHT", "MIRRORGATE_POOL_FILLS",
                                  "MIRRORGATE_POOL_TARBALLS"])
def test_a_bound_of_zero_is_refused_naming_the_variable(name: str) -> None:
    [problem] = problems(**{name: "0"})
    assert problem.startswith(f"{name}: 0 is out of range")


def test_a_timeout_that_is_not_a_number_is_refused() -> None:
    [problem] = problems(MIRRORGATE_WRITE_STALL_TIMEOUT="soon")
    assert problem.startswith("MIRRORGATE_WRITE_STALL_TIMEOUT: 'soon' is not a number")


def test_a_data_directory_that_cannot_hold_the_state_store_is_a_warning_naming_the_way_out(
        tmp_path: Path) -> None:
    # a read-only root filesystem: the SQLite state store cannot be kept there, so the process
    # never becomes ready; PostgreSQL (MIRRORGATE_DATABASE_URL) needs no volume
    (tmp_path / "ro").write_text("a file where a directory would have to be made")
    registry = {"MIRRORGATE_PRIVATE_UPSTREAM": "http://127.0.0.1:4873/"}

    blocked = str(tmp_path / "ro" / "data")
    [warning] = load_settings({**BASE, **registry, "MIRRORGATE_DATA_DIR": blocked},
                              npm_registry=no_npm).warnings()
    assert "MIRRORGATE_DATA_DIR" in warning
    assert "/readyz stays 503" in warning
    assert "MIRRORGATE_DATABASE_URL" in warning
    assert load_settings({**BASE, **registry, "MIRRORGATE_DATA_DIR": blocked,
                          "MIRRORGATE_DATABASE_URL": "postgresql://mg:pw@db:5432/mg"},
                         npm_registry=no_npm).warnings() == []
    assert load_settings({**BASE, **registry, "MIRRORGATE_DATA_DIR": str(tmp_path / "rw")},
                         npm_registry=no_npm).warnings() == []
    # the embedded store needs the directory anyway (start-up refuses an unwritable one)
    assert load_settings({**BASE, "MIRRORGATE_DATA_DIR": blocked},
                         npm_registry=no_npm).warnings() == []


SLACK = "https://hooks.slack.com/services/T0AAA/B0BBB/abcdefghijklmnopqrstuvwx"
NOTIFY_SECRET = "n0tify-" + "q" * 40


def test_the_webhook_and_its_secret_are_read_and_shown_with_only_the_host() -> None:
    settings = load_settings({**BASE, "MIRRORGATE_NOTIFY_URL": SLACK,
                              "MIRRORGATE_NOTIFY_SECRET": NOTIFY_SECRET}, npm_registry=no_npm)
    summary = settings.summary()

    assert settings.notify.url is not None
    assert settings.notify.url.reveal() == SLACK
    assert summary["notify.url"] == "https://hooks.slack.com/**redacted**"
    assert summary["notify.secret"] == "**redacted**"
    shown = str(summary) + repr(settings)
    assert "abcdefghijklmnop" not in shown
    assert NOTIFY_SECRET not in shown
    # both are scrubbed from log lines, the URL's path (its token) on its own too
    revealed = {secret.reveal() for secret in settings.secrets()}
    assert {SLACK, NOTIFY_SECRET, "/services/T0AAA/B0BBB/abcdefghijklmnopqrstuvwx"} <= revealed


def test_without_a_webhook_nothing_is_notified() -> None:
    settings = load_settings(BASE, npm_registry=no_npm)
    assert settings.notify.url is None
    assert settings.summary()["notify.url"] is None


@pytest.mark.parametrize("url", ["ftp://hooks.example.com/x", "hooks.example.com/x",
                                 "https://user:pw@hooks.example.com/x", "http://h:port/x"])
def test_a_webhook_that_is_not_an_http_url_is_refused_without_echoing_it(url: str) -> None:
    [problem] = problems(MIRRORGATE_NOTIFY_URL=url)
    assert problem.startswith("MIRRORGATE_NOTIFY_URL:")
    assert url not in problem


def test_a_short_notify_secret_is_refused_by_its_length_only() -> None:
    short = "short-" + "s" * 6
    [problem] = problems(MIRRORGATE_NOTIFY_URL=SLACK, MIRRORGATE_NOTIFY_SECRET=short)
    assert "12 characters; use at least 32" in problem
    assert short not in problem


def test_a_notify_secret_without_a_webhook_is_refused() -> None:
    [problem] = problems(MIRRORGATE_NOTIFY_SECRET=NOTIFY_SECRET)
    assert "without MIRRORGATE_NOTIFY_URL" in problem


def test_each_part_receives_the_values_the_whole_settings_hold_for_its_fields(
    tmp_path: Path,
) -> None:
    """A slice is cut from the one `Settings` by field name: a value set in the environment
    reaches the part that reads it unchanged, and a secret stays a redacted `Secret`."""
    settings = load_settings({**BASE, "MIRRORGATE_DATA_DIR": str(tmp_path),
                              "MIRRORGATE_CACHE_TTL": "7", "MIRRORGATE_OPERATORS": "alice",
                              "MIRRORGATE_PRIVATE_TOKEN": "private-token-value",
                              "MIRRORGATE_WORKER_CONCURRENCY": "3"}, npm_registry=no_npm)
    for part in (settings.store, settings.upstreams, settings.gate, settings.identity,
                 settings.serve, settings.worker, settings.via_proxy):
        for item in fields(part):
            if item.name not in ("identity", "secrets"):
                assert getattr(part, item.name) == getattr(settings, item.name), item.name
    assert (settings.gate.cache_ttl, settings.serve.cache_ttl, settings.worker.cache_ttl) == (
        7.0, 7.0, 7.0)
    assert settings.serve.identity.operators == ("alice",)
    assert settings.worker.worker_concurrency == 3
    assert settings.store.data_dir == tmp_path
    assert settings.serve.secrets == settings.logs.secrets == settings.secrets()
    assert "private-token-value" not in repr(settings.upstreams)
