"""The variable table: every MIRROR_*/MIRRORGATE_* variable, declared once.

`--help`, `check-config` and docs/configuration.md (`configdoc`) are generated from
`VARIABLES`, and the loader reads its defaults, so the list a person reads cannot drift from
the list the code reads. A set variable the table does not name is reported as a likely typo.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass

MIB = 1024 * 1024

PROXY = "proxy"
"""Read where `mirrorgate serve` answers clients."""
WORKER = "worker"
"""Read by the mirror worker: `mirrorgate worker`, and `mirrorgate serve` with its in-process
worker."""
COMMANDS = "commands"
"""Read by the operator commands (`mirrorgate check`...), never by a running proxy or worker."""


OSV_NPM_EXPORT = "https://osv-vulnerabilities.storage.googleapis.com/npm/all.zip"
"""OSV's public export of the npm ecosystem: the default source of known malware (its `MAL-`
records), fetched at start-up and hourly with conditional requests (docs/serving.md#known-
malware-by-default)."""

SQS_URL_HINT = ("set it to the QueueUrl that `aws sqs get-queue-url --queue-name mirrorgate` "
                "prints (docs/queues.md#amazon-sqs)")
"""What to do about a missing MIRROR_SQS_QUEUE_URL, said once for config and the backend."""


@dataclass(frozen=True)
class Var:
    name: str
    default: str | None
    help: str
    secret: bool = False
    # Which side reads it (docs/configuration.md is rendered from these fields by
    # `mirrorgate.configdoc`), and the docs/ page and section that explain it further.
    read_by: tuple[str, ...] = (PROXY, WORKER)
    see: str | None = None


VARIABLES: tuple[Var, ...] = (
    Var("MIRROR_QUEUE_PROVIDER", "memory", "queue backend: memory (in process), sqs or pubsub",
        see="queues.md"),
    Var("MIRROR_QUEUE_MAX_DEPTH", "10000", "jobs the memory queue (or a network backend's send "
        "buffer) holds before it drops the newest",
        see="queues.md#memory"),
    Var("MIRROR_POLL_WAIT_SECONDS", "20", "longest a receive waits for a job (1..20)",
        read_by=(WORKER,), see="queues.md"),
    Var("MIRROR_VISIBILITY_SECONDS", "60", "how long the worker holds a job in flight before it "
        "must extend it again (10..600)",
        read_by=(WORKER,), see="worker.md#retries"),
    Var("MIRROR_SQS_QUEUE_URL", None, "SQS queue URL (MIRROR_QUEUE_PROVIDER=sqs); also reads "
        "AWS_REGION, AWS_ENDPOINT_URL_SQS and the default AWS credential chain",
        see="queues.md#amazon-sqs"),
    Var("MIRROR_PUBSUB_TOPIC", None, "Pub/Sub topic projects/P/topics/T to publish jobs to "
        "(MIRROR_QUEUE_PROVIDER=pubsub); honours PUBSUB_EMULATOR_HOST",
        see="queues.md#google-pubsub"),
    Var("MIRROR_PUBSUB_SUBSCRIPTION", None, "Pub/Sub subscription projects/P/subscriptions/S "
        "the worker pulls from",
        see="queues.md#google-pubsub"),
    Var("MIRRORGATE_JOB_KEY", None, "secret (32+ characters) the proxy signs jobs with and the "
        "worker requires (HMAC-SHA256; sqs and pubsub); the same value on both", secret=True,
        see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_FILE", None, "file holding that key (a mounted Secret)",
        see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_PREVIOUS", None, "the key being rotated out: the worker still "
        "accepts jobs signed with it", secret=True,
        read_by=(WORKER,), see="queues.md#signed-jobs"),
    Var("MIRRORGATE_JOB_KEY_PREVIOUS_FILE", None, "file holding the previous key",
        read_by=(WORKER,), see="queues.md#signed-jobs"),
    Var("MIRRORGATE_LISTEN", "127.0.0.1:8080", "host:port the proxy listens on",
        read_by=(PROXY,)),
    Var("MIRRORGATE_WORKER_LISTEN", "127.0.0.1:8081", "host:port of `mirrorgate worker`'s "
        "/livez, /readyz and /metrics",
        read_by=(WORKER,), see="operations.md#health"),
    Var("MIRRORGATE_PUBLIC_URL", None, "mirrorgate's external root URL, e.g. "
        "https://npm.example.com/ (tarball URLs become .../npm/<name>/-/<file>; default: from "
        "the request's Host, or X-Forwarded-* from MIRRORGATE_TRUSTED_PROXIES)",
        read_by=(PROXY,), see="serving.md#headers-from-clients-the-base-url"),
    Var("MIRRORGATE_PUBLIC_UPSTREAM", None, "the public npm registry URL (default: the registry "
        "npm is configured with)"),
    Var("MIRRORGATE_PRIVATE_UPSTREAM", None, "the organisation's npm registry URL (http(s)://) or "
        "an embedded store (file:///path); default: file store under MIRRORGATE_DATA_DIR",
        see="serving.md#the-private-upstream"),
    Var("MIRRORGATE_PRIVATE_TOKEN", None, "bearer token for the private upstream and mirror "
        "target", secret=True,
        see="serving.md#the-private-upstream"),
    Var("MIRRORGATE_PRIVATE_TOKEN_FILE", None, "file holding that token (a mounted Secret)",
        see="deployment.md#what-to-set"),
    Var("MIRRORGATE_MIRROR_TARGET", None, "where the worker publishes (default: the private "
        "upstream)",
        read_by=(WORKER,), see="worker.md"),
    Var("MIRRORGATE_DATA_DIR", None, "where mirrorgate remembers the names it learned are "
        "first-party and the versions it saw the public registry withdraw, and the embedded "
        "file store's home; keep it on a volume that outlives the process (default: "
        "$XDG_DATA_HOME/mirrorgate, else ~/.local/share/mirrorgate)",
        see="withdrawals.md#what-mirrorgate-remembers"),
    Var("MIRRORGATE_DATABASE_URL", None, "PostgreSQL URL of the state store a fleet shares "
        "(postgresql://user:password@host:5432/mirrorgate; needs the postgres extra); unset: "
        "the embedded SQLite file MIRRORGATE_DATA_DIR/state.sqlite3, for one replica and its "
        "sidecar", secret=True, see="state-store.md"),
    Var("MIRRORGATE_DATABASE_URL_FILE", None, "file holding that URL (a mounted Secret)",
        see="state-store.md"),
    Var("MIRRORGATE_PULL_LOG_RETENTION", "90", "days the pull log (who pulled which tarball, "
        "for `mirrorgate exposure`) keeps a record (1..3650)", read_by=(PROXY, COMMANDS),
        see="exposure.md"),
    Var("MIRRORGATE_PULL_LOG_MAX_RECORDS", "10000000", "records the pull log keeps at most "
        "(served pulls, and refusals counted per client, version, rule and hour), the whole "
        "fleet's together; past it the oldest go, refusal counts first (1,000..1,000,000,000; "
        "about 470 bytes a record on SQLite, 555 on PostgreSQL)", read_by=(PROXY,),
        see="exposure.md"),
    Var("MIRRORGATE_RULES_FILE", None, "TOML file of admission rules, read again when it "
        "changes; a rewrite that is missing, empty or cut short keeps the rules in force, so "
        "only unsetting this means no rules file (default: the default policy, stated below "
        "the table)",
        see="serving.md#admission-rules"),
    Var("MIRRORGATE_MALWARE_FEED", OSV_NPM_EXPORT, "where known malware comes from when the "
        "rules file has no [advisories] table: the MAL- records of an OSV npm export, as an "
        "https URL of its zip, a path to a copy (a zip or a directory of records), or off",
        read_by=(PROXY, WORKER, COMMANDS), see="serving.md#known-malware-by-default"),
    Var("MIRRORGATE_OPERATOR_CONTACT", None, "who a person asks for an exception to the "
        "admission rules (an address, a channel, a URL), named in every refusal a client "
        "prints (default: \"mirrorgate's operator\")",
        read_by=(PROXY,), see="serving.md#what-each-client-prints-for-a-denied-version"),
    Var("MIRRORGATE_WAIVER_GRANTERS", None, "clients of MIRRORGATE_CLIENT_TOKENS_FILE, by name, "
        "comma-separated, who may grant and revoke waivers from the status page once signed "
        "in (default: none; `mirrorgate allow` run where the state store is reachable always "
        "can)", read_by=(PROXY,), see="serving.md#waivers-mirrorgate-allow"),
    Var("MIRRORGATE_OPERATORS", None, "clients of MIRRORGATE_CLIENT_TOKENS_FILE, by name, "
        "comma-separated, who read every client's pulls on the status page (who pulled which "
        "version, when, how often); any other client reads its own. A client "
        "MIRRORGATE_WAIVER_GRANTERS names is one too; a CI job's ID token never is (default: "
        "none)", read_by=(PROXY,), see="operations.md#status-page"),
    Var("MIRRORGATE_CLIENT_TOKENS_FILE", None, "file of client tokens, one `NAME sha256:HEX` a "
        "line; when set, every /npm/ request needs one of them (default: open, access control "
        "is the network's job)",
        see="serving.md#who-may-use-it"),
    Var("MIRRORGATE_PROXY_TOKEN", None, "client token the operator commands (`mirrorgate check "
        "--proxy URL`...) send to a running mirrorgate that requires one", secret=True,
        read_by=(COMMANDS,), see="operations-commands.md"),
    Var("MIRRORGATE_PROXY_TOKEN_FILE", None, "file holding that token",
        read_by=(COMMANDS,), see="operations-commands.md"),
    Var("MIRRORGATE_METRICS_OPEN", "false", "true: /metrics answers without a client token "
        "when MIRRORGATE_CLIENT_TOKENS_FILE is set",
        see="serving.md#client-tokens"),
    Var("MIRRORGATE_OIDC_AUDIENCE", "mirrorgate", "audience (`aud`) a CI's ID token must be "
        "issued for to sign in through an issuer line of the tokens file",
        read_by=(PROXY,), see="ci-identity.md"),
    Var("MIRRORGATE_OIDC_TIMEOUT", "5", "seconds an issuer's discovery document and keys may "
        "take to fetch; past it that issuer's tokens are refused (503), other requests untouched",
        read_by=(PROXY,), see="ci-identity.md"),
    Var("MIRRORGATE_TRUSTED_PROXIES", None, "addresses and CIDRs (comma-separated) whose "
        "X-Forwarded-Proto, X-Forwarded-Host and Forwarded headers are believed",
        read_by=(PROXY,), see="serving.md#headers-from-clients-the-base-url"),
    Var("MIRRORGATE_CACHE_TTL", "60", "seconds a fetched packument is served before it is "
        "revalidated upstream",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_CACHE_MAX_ENTRIES", "5000", "packuments held in the metadata cache",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_CACHE_MAX_BYTES", str(512 * MIB), "bytes the metadata cache may hold",
        read_by=(PROXY,), see="serving.md#caching"),
    Var("MIRRORGATE_MAX_METADATA_BYTES", str(32 * MIB), "largest packument body read from an "
        "upstream",
        see="serving.md#caching"),
    Var("MIRRORGATE_MAX_TARBALL_BYTES", str(256 * MIB), "largest tarball the worker mirrors",
        read_by=(WORKER,), see="worker.md#what-the-worker-checks-in-order"),
    Var("MIRRORGATE_MAX_PUBLISH_BYTES", str(100 * MIB), "largest `npm publish` body a client "
        "may send through the proxy (refused with 413 as soon as it is crossed)",
        read_by=(PROXY,), see="publishing.md#what-is-checked-in-a-publish"),
    Var("MIRRORGATE_UPSTREAM_TIMEOUT", "30", "seconds an upstream call may take (waiting for a "
        "pooled connection, and each read); a new connection, TCP and TLS, is given at most 10 "
        "of them"),
    Var("MIRRORGATE_REQUEST_TIMEOUT", "60", "seconds a client request may take before 504",
        read_by=(PROXY,)),
    Var("MIRRORGATE_POOL_FILLS", "32", "connections per upstream for serve-path packument "
        "fills (their own pool: tarball streams and the worker cannot take them)",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_POOL_TARBALLS", "64", "connections per upstream for serve-path tarball "
        "streams",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_POOL_WORKER", "8", "connections per upstream for the mirror worker (at "
        "least MIRRORGATE_WORKER_CONCURRENCY)",
        read_by=(WORKER,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_MAX_IN_FLIGHT", None, "requests doing upstream work at once (packument "
        "misses, versions, tarballs; warm cache hits are not counted); past it a request waits "
        "up to 1 s, then gets 503 with Retry-After (default: 64 per CPU core, at least 64)",
        read_by=(PROXY,), see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_HEAD_TIMEOUT", "10", "seconds a client may take to send a complete request "
        "head (from connecting, or from the first byte of a later request)",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_KEEPALIVE_TIMEOUT", "75", "seconds an idle keep-alive connection is kept "
        "open",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_WRITE_STALL_TIMEOUT", "30", "seconds a response may stay blocked on a "
        "client that stopped reading before the connection is cut",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SEND_MIN_RATE", "500", "bytes a second a client must take a tarball at, "
        "measured over each 5 s once the grace has passed, or the connection is cut (Apache's "
        "MinRate, for responses; 0 turns it off)",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SEND_MIN_RATE_GRACE", "20", "seconds from a tarball response's first byte "
        "before MIRRORGATE_SEND_MIN_RATE applies",
        see="serving.md#overload-and-slow-clients"),
    Var("MIRRORGATE_SPOOL_MAX_BYTES", None, "bytes of tarballs being read that the spools may "
        "hold at once, those up to 4 MiB in memory (64 MiB at most), the rest in files under "
        "MIRRORGATE_DATA_DIR/spool; a tarball that does not fit streams per request (default: "
        "a quarter of the free space there, at most 1 GiB)",
        see="serving.md#one-download-per-tarball"),
    Var("MIRRORGATE_HANDOFF_MAX_BYTES", None, "bytes of public tarballs the proxy verified "
        "that it keeps, in unnamed files under MIRRORGATE_DATA_DIR/handoff for at most 10 "
        "minutes, for the worker beside it (`mirrorgate serve` with its worker) to mirror "
        "without downloading them again, with the digest they matched (the worker checks the "
        "bytes read back with the sha1 it publishes) "
        "(0: the worker downloads every one; default: a quarter of the free space there, at "
        "most 1 GiB)",
        read_by=(PROXY,), see="serving.md#one-download-per-version"),
    Var("MIRRORGATE_RELEASE_PREVIOUS_MAX_BYTES", str(64 * 1024 * 1024), "bytes of the "
        "previous version's tarball the release signals fetch at most to compare a first pull "
        "with; a larger one is the publisher's doing, and the version is refused as "
        "unreadable-release", read_by=(PROXY,), see="serving.md#release-signals-causes"),
    Var("MIRRORGATE_RELEASE_TIMEOUT", "20", "seconds the release signals may take to fetch "
        "the previous version's tarball, and to look up each new dependency; past it the "
        "version is unchecked (release.unavailable decides)",
        read_by=(PROXY,), see="serving.md#release-signals"),
    Var("MIRRORGATE_MAX_DELIVERIES", "5", "deliveries after which a job is retired",
        read_by=(WORKER,), see="worker.md#retries"),
    Var("MIRRORGATE_WORKER_CONCURRENCY", "1", "mirror jobs in flight at once",
        read_by=(WORKER,), see="worker.md"),
    Var("MIRRORGATE_HEARTBEAT_STALE_AFTER", "120", "seconds without a worker heartbeat before "
        "/livez answers 503",
        read_by=(WORKER,), see="operations.md#health"),
    Var("MIRRORGATE_DRAIN_TIMEOUT", "30", "seconds in-flight work may take to finish after "
        "SIGTERM",
        see="operations.md#health"),
    Var("MIRRORGATE_NOTIFY_URL", None, "webhook the security events are POSTed to as "
        "CloudEvents JSON with a one-line `text` (a Slack or Teams incoming webhook, an "
        "incident tool); kept secret, since such URLs carry their own token", secret=True,
        see="operations.md#notifications"),
    Var("MIRRORGATE_NOTIFY_SECRET", None, "secret (32+ characters) the notifications are "
        "signed with: HMAC-SHA256 of the body in X-Mirrorgate-Signature", secret=True,
        see="operations.md#notifications"),
    Var("MIRRORGATE_NOTIFY_SECRET_FILE", None, "file holding that secret (a mounted Secret)",
        see="operations.md#notifications"),
    Var("MIRRORGATE_LOG_LEVEL", "info", "debug, info, warning or error",
        see="operations.md#log-events"),
    Var("MIRRORGATE_EVENT_LOOP", "auto", "the event loop: uvloop, asyncio (the standard "
        "library's) or auto (uvloop when it is installed)",
        see="serving.md#the-runtime"),
    Var("MIRRORGATE_LOG_FORMAT", "auto", "json, console or auto (console on a TTY)",
        see="operations.md#log-events"),
)
BY_NAME = {var.name: var for var in VARIABLES}
OWN_PREFIXES = ("MIRRORGATE_", "MIRROR_")
"""Variables with these prefixes are mirrorgate's; one it does not read is most likely a typo
(`MIRRORGATE_RULE_FILE`) that would otherwise be ignored in silence."""


@dataclass(frozen=True)
class UnknownVariable:
    name: str
    suggestion: str | None

    def warning(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return (f"{self.name} is set but mirrorgate does not read it{hint} "
                "(`mirrorgate --help` lists every variable)")


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[UnknownVariable]:
    """The MIRRORGATE_* and MIRROR_* variables in the environment that no setting reads, each
    with the closest known name when there is one, sorted by name."""
    env = os.environ if environ is None else environ
    found = []
    for name in sorted(env):
        if not name.startswith(OWN_PREFIXES) or name in BY_NAME:
            continue
        close = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.75)
        found.append(UnknownVariable(name, close[0] if close else None))
    return found
