"""Running a mirrorgate process: wiring its parts, serving, and stopping gracefully.

One process runs one `Shape`: the proxy and a worker together, the proxy alone, or the worker
alone with `/livez`, `/readyz` and `/metrics` on `MIRRORGATE_WORKER_LISTEN`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from mirrorgate import runtime, tracing
from mirrorgate.access.tokens import ClientTokens, ClientTokensError, policy_problem
from mirrorgate.advisories import AdvisoryFeed
from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.commands.verdicts import GateVerdicts
from mirrorgate.config import IdentitySettings, Settings, unknown_variables
from mirrorgate.errors import MirrorgateError
from mirrorgate.gate import WithdrawnVersions
from mirrorgate.gate.assembled import Gate
from mirrorgate.gate.kept.facts import KeptFacts
from mirrorgate.gate.kept.imported import import_files
from mirrorgate.gate.kept.waivers import follow_waivers
from mirrorgate.gate.packuments.public import (
    FALLBACK_BYTES,
    CachedPublic,
    PublicPackuments,
    ServedPublic,
)
from mirrorgate.gate.packuments.service import PINS
from mirrorgate.gate.pulls.exposure import ExposureWarnings
from mirrorgate.gate.pulls.log import PullLog
from mirrorgate.handoff import HANDOFF_DIR, Handoff, files_for
from mirrorgate.healthz import Health, Heartbeat, add_health_routes
from mirrorgate.logs import configure_logging, register_secret
from mirrorgate.metrics import Metrics
from mirrorgate.mirror import MirrorJob, MirrorQueue, QueueMessage
from mirrorgate.notify import Notifier
from mirrorgate.rules import LiveRules, Rules, RulesError
from mirrorgate.serve.access import install_access
from mirrorgate.serve.app import Proxy, answer_warm_first, build_proxy_app
from mirrorgate.serve.listener import ClientBounds, GuardedSite
from mirrorgate.store import Store, StoreSetupError, open_store
from mirrorgate.tasks import Tasks
from mirrorgate.upstream.clients import Upstreams
from mirrorgate.upstream.filestore import StoreError
from mirrorgate.upstream.registry import open_registry, store_root
from mirrorgate.worker.job import WorkerDeps
from mirrorgate.worker.loop import Worker
from mirrorgate.worker.target import MirrorTarget, open_target

__all__ = ["CommandMirroring", "Shape", "StartupError", "run"]

log = structlog.get_logger("mirrorgate")


class StartupError(MirrorgateError):
    """A process that cannot start; the message says what to set or fix."""


class Shape(enum.Enum):
    """What one process runs."""

    SINGLE = "single"  # `serve`: proxy and worker together (the only shape the memory queue allows)
    PROXY = "proxy"  # `serve --no-worker`: the proxy alone, a sidecar worker elsewhere
    WORKER = "worker"  # `worker`: the worker alone, with health and metrics on its own port

    @classmethod
    def of(cls, command: str, with_worker: bool) -> Shape:
        if command == "worker":
            return cls.WORKER
        return cls.SINGLE if with_worker else cls.PROXY

    @property
    def command(self) -> str:
        return "worker" if self is Shape.WORKER else "serve"

    @property
    def serves(self) -> bool:
        return self is not Shape.WORKER

    @property
    def runs_worker(self) -> bool:
        return self is not Shape.PROXY

    @property
    def label(self) -> str:
        """The command line that runs this shape, as a person reads it in a notification."""
        return "serve --no-worker" if self is Shape.PROXY else self.command


class CommandMirroring:
    """The worker side of `mirrorgate prewarm` (`commands.prewarm.Mirroring`), built as
    `mirrorgate serve` builds its worker: the same target, public client, rules and metrics."""

    def __init__(self, settings: Settings, gate: GateVerdicts) -> None:
        self.settings = settings
        self.gate = gate
        self.target = open_target(settings.mirror_target, gate.upstreams.target,
                                  max_tarball_bytes=settings.max_tarball_bytes)

    async def run(self, queue: MirrorQueue, heard: Callable[[QueueMessage, str], None],
                  stop: asyncio.Event) -> None:
        deps = WorkerDeps(settings=self.settings.worker, queue=queue,
                          public=self.gate.upstreams.public, target=self.target,
                          metrics=self.gate.metrics,
                          heartbeat=Heartbeat(self.settings.heartbeat_stale_after),
                          rules=self.gate.rules, on_outcome=heard,
                          release=self.gate.gate.release,
                          # the fleet's takedowns (`parts.as_the_fleet`): never mirrored here
                          withdrawals=self.gate.gate.withdrawals)
        await Worker(deps, idle_pause=0.05).run(stop)

    async def holds(self, job: MirrorJob) -> bool:
        return await self.target.holds(job)


def _ensure_store(url: str) -> None:
    if url.startswith("file://"):
        root = store_root(url)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StartupError(f"cannot create the file store at {root}: {error.strerror}; "
                               "set MIRRORGATE_DATA_DIR to a writable directory, or "
                               "MIRRORGATE_PRIVATE_UPSTREAM to a registry URL") from None


def _check_shape(settings: Settings, shape: Shape) -> None:
    memory = settings.queue.provider == "memory"
    if shape is Shape.WORKER and memory:
        raise StartupError(
            "`mirrorgate worker` cannot use MIRROR_QUEUE_PROVIDER=memory: an in-memory queue "
            "lives inside one process, so a separate worker would never see its jobs. Run "
            "`mirrorgate serve` (proxy and worker in one process), or set "
            "MIRROR_QUEUE_PROVIDER=sqs or pubsub for a sidecar worker.")
    if shape is Shape.PROXY and memory:
        raise StartupError(
            "`mirrorgate serve --no-worker` with MIRROR_QUEUE_PROVIDER=memory would enqueue "
            "jobs that no worker can ever receive. Drop --no-worker, or set "
            "MIRROR_QUEUE_PROVIDER=sqs or pubsub and run `mirrorgate worker` beside it.")


class _ServerLog(logging.Handler):
    """aiohttp's server log records as structlog lines with stable names, never tracebacks.

    aiohttp's server logger speaks before any handler runs: a request line its parser refuses
    (raw control characters, a bad method) is answered 400 and logged there with a traceback.
    Here it becomes one `http_request_malformed` line (counted in
    `mirrorgate_refusals{reason="malformed_request"}`, the client's bytes left out); anything
    else at warning or above, `http_server_error`."""

    def __init__(self, metrics: Metrics) -> None:
        super().__init__(logging.DEBUG)
        self._metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            self._metrics.refusals.labels("malformed_request").inc()
            # the first line names the problem; the rest echoes the client's bytes
            reason = (error.message or type(error).__name__).strip().splitlines()[0].rstrip(":")
            log.warning("http_request_malformed", status=error.code, reason=reason[:200])
        elif record.levelno >= logging.WARNING:
            log.error("http_server_error", message=record.getMessage()[:300],
                      error=type(error).__name__ if error is not None else None)


def _server_logger(metrics: Metrics) -> logging.Logger:
    logger = logging.getLogger(f"mirrorgate.http.{id(metrics)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.handlers = [_ServerLog(metrics)]
    return logger


@contextlib.asynccontextmanager
async def _listening(app: web.Application, host: str, port: int, settings: Settings,
                     metrics: Metrics) -> AsyncIterator[web.AppRunner]:
    runner = web.AppRunner(app, shutdown_timeout=settings.drain_timeout, access_log=None,
                           handle_signals=False, logger=_server_logger(metrics),
                           keepalive_timeout=settings.keepalive_timeout)
    await runner.setup()
    answer_warm_first(runner)  # the proxy's warm packuments, before routing (`serve.app`)
    # aiohttp has the idle keep-alive timeout; GuardedSite adds the head-read and write-stall
    # bounds it lacks
    bounds = ClientBounds(head_timeout=settings.head_timeout,
                          write_stall_timeout=settings.write_stall_timeout,
                          on_cut=lambda reason: metrics.slow_clients.labels(reason).inc())
    try:
        await GuardedSite(runner, host, port, bounds=bounds, backlog=1024).start()
    except OSError as error:
        await runner.cleanup()
        raise StartupError(f"cannot listen on {host}:{port}: {error.strerror}; set "
                           "MIRRORGATE_LISTEN (or MIRRORGATE_WORKER_LISTEN) to a free "
                           "host:port") from None
    yield runner


def _client_tokens(settings: IdentitySettings, metrics: Metrics,
                   rules: LiveRules) -> ClientTokens | None:
    """The tokens file, checked against the rules file both ways (`policy_problem`): at start
    and whenever either is read again, every policy set a line names must be defined."""
    path = settings.client_tokens_file
    if path is None:
        return None
    try:
        clients = ClientTokens(path, on_reload_failed=lambda _problem:
                               metrics.client_tokens_reload_failures.inc(),
                               check=lambda found: policy_problem(found, rules.current,
                                                                  str(path)))
    except ClientTokensError as error:
        raise StartupError(f"MIRRORGATE_CLIENT_TOKENS_FILE: {error}") from None
    rules.check = lambda fresh: policy_problem(clients.file, fresh, str(path))
    log.info("client_tokens_loaded", path=str(settings.client_tokens_file),
             clients=len(clients.clients))
    return clients


async def _run(settings: Settings, shape: Shape) -> int:
    _check_shape(settings, shape)
    metrics = Metrics()
    heartbeat = Heartbeat(settings.heartbeat_stale_after) if shape.runs_worker else None
    # every background loop of the process is started through `health.tasks`, watched
    health = Health(heartbeat=heartbeat, tasks=Tasks(metrics))
    if heartbeat is not None:
        metrics.watch_heartbeat(heartbeat.age)

    try:  # the worker re-gates every job with the same rules the proxy gates with
        rules = LiveRules.load(settings.rules_file, malware_feed=settings.malware_feed,
                               on_reload_failed=metrics.rules_reload_failures.inc)
    except RulesError as error:
        raise StartupError(f"MIRRORGATE_RULES_FILE: {error}") from None
    for warning in rules.current.warnings(datetime.now(UTC)):
        log.warning("rules_warning", reason=warning)
    if shape.serves:
        _ensure_store(settings.private_upstream)
    if shape.runs_worker:
        _ensure_store(settings.mirror_target)
    clients = _client_tokens(settings.identity, metrics, rules)

    def dropped(total: int) -> None:
        # A network backend's send buffer logs its own drops (with its depth); logging them
        # here too would double every report.
        if settings.queue.provider == "memory":
            log.warning("mirror_queue_dropped", provider="memory", dropped=total,
                        cap=settings.queue.max_depth)

    try:
        queue = await open_queue(settings.queue, on_drop=dropped)
    except QueueUnavailableError as error:
        raise StartupError(str(error)) from None
    metrics.watch_queue(queue.stats, queue.provider)

    facts = await _open_facts(settings, metrics, health)
    follow_waivers(facts, rules)  # `mirrorgate allow`'s waivers, beside `[[exception]]`
    upstreams = Upstreams.from_settings(settings.upstreams, metrics)
    notifier = _notifier(settings, shape, metrics)
    await upstreams.start()
    try:
        if notifier is not None:
            await notifier.start(health.tasks)
            metrics.events.send_alerts_to(notifier.post)
        return await _serve(settings, shape, metrics, health, queue, upstreams, rules, clients,
                            notifier, facts)
    finally:
        await queue.close()
        await upstreams.close()
        await facts.close()
        if notifier is not None:  # last: the drain above may still raise alerts
            await notifier.close()


async def _open_facts(settings: Settings, metrics: Metrics, health: Health) -> KeptFacts:
    """The state store's facts, loaded when it answers; a store that does not answer leaves
    /readyz 503 with the reason and is tried again in the background (`KeptFacts.run`), while
    one that cannot be used as it is (a migration that cannot run) stops start-up."""

    async def importer(store: Store) -> int:
        return await import_files(settings.data_dir, store)

    facts = KeptFacts(lambda: open_store(settings.store), metrics=metrics, importer=importer)
    try:
        await facts.open()
    except StoreSetupError as error:
        raise StartupError(str(error)) from None
    health.waiting_for.append(
        lambda: None if facts.ready else f"the state store is not loaded: "
                                         f"{facts.problem or 'connecting'}")
    return facts


def _notifier(settings: Settings, shape: Shape, metrics: Metrics) -> Notifier | None:
    if settings.notify.url is None:
        return None
    source = settings.public_url or f"urn:mirrorgate:{socket.gethostname()}"
    return Notifier(settings.notify, metrics, source=source, process=shape.label)


class _Feeds:
    """The advisory feed of the rules in force, run and counted; when a reloaded rules file
    changes its `[advisories]` settings, the old feed stops and the new one starts."""

    def __init__(self, rules: LiveRules, metrics: Metrics, stop: asyncio.Event,
                 tasks: Tasks) -> None:
        self.rules = rules
        self.metrics = metrics
        self.stop = stop
        self.tasks = tasks
        self.feed: AdvisoryFeed | None = None
        self.task: asyncio.Task[None] | None = None
        if rules.current.advisories is not None:
            metrics.watch_advisories(self._state)

    def _state(self) -> tuple[int, float | None]:
        feed = self.feed
        if feed is None:
            return 0, None
        index, age = feed.index, feed.age(datetime.now(UTC))
        return (index.records if index is not None else 0,
                age.total_seconds() if age is not None else None)

    def follow(self, rules: Rules) -> None:
        """Run `rules`' feed, unless it is the one running already."""
        feed = rules.advisories.feed if rules.advisories is not None else None
        if feed is self.feed:
            return
        if self.task is not None:
            self.task.cancel()
        self.feed, self.task = feed, None
        if feed is not None:
            feed.on_outcome = lambda outcome: self.metrics.advisory_loads.labels(outcome).inc()
            # loading never blocks serving: the first load runs beside the listener, and
            # until it lands the rules' `unavailable` setting decides
            self.task = self.tasks.keep("advisory-feed", lambda: feed.run(self.stop))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def _serve(settings: Settings, shape: Shape, metrics: Metrics, health: Health,
                 queue: MirrorQueue, upstreams: Upstreams, rules: LiveRules,
                 clients: ClientTokens | None, notifier: Notifier | None,
                 facts: KeptFacts) -> int:
    # the proxy hands the tarballs it verified to the worker beside it: one download a version
    handoff = (Handoff(settings.data_dir / HANDOFF_DIR, settings.handoff_max_bytes,
                       max_files=files_for(runtime.open_files()))
               if shape.serves and shape.runs_worker and settings.handoff_max_bytes else None)
    # who pulled which tarball, written through the store the facts opened (`gate.pulls.log`)
    pulls = PullLog(facts, retention_days=settings.pull_log_retention_days,
                    max_records=settings.pull_log_max_records, metrics=metrics)
    # the one gate of this process: the proxy serves through it, the worker re-gates with
    # its withdrawals and verdicts (`gate.gate`)
    gate = Gate(settings=settings.gate, public=upstreams.public,
                private=open_registry(settings.private_upstream, upstreams.private),
                rules=rules, metrics=metrics, facts=facts,
                pins=PINS if shape.serves and shape.runs_worker else 0)
    withdrawals: WithdrawnVersions = gate.withdrawals
    if shape.serves:
        app = build_proxy_app(Proxy(settings=settings.serve, public=upstreams.public,
                                    private=gate.private, queue=queue, rules=rules,
                                    metrics=metrics, health=health, gate=gate,
                                    clients=clients, worker_beside=shape.runs_worker,
                                    handoff=handoff, pulls=pulls))
        # the worker beside the proxy judges a job by the proxy's own verdict on the version
        packuments: PublicPackuments = (
            ServedPublic(gate.packuments, CachedPublic(upstreams.public, settings.worker,
                                                       max_bytes=FALLBACK_BYTES)))
        host, port = settings.listen
    else:
        app = web.Application()
        add_health_routes(app, health, metrics)
        identity = settings.identity
        install_access(app, clients, metrics=metrics, metrics_open=identity.metrics_open,
                       oidc=identity.oidc, tasks=health.tasks)
        packuments = CachedPublic(upstreams.public, settings.worker)
        host, port = settings.worker_listen
    # a withdrawal seen for the first time: who already pulled the version (`gate.pulls.exposure`)
    warnings = ExposureWarnings(pulls, metrics)
    if shape.serves:  # and a version served that a deny entry or an advisory now denies
        gate.source.on_gated = warnings.gated
    withdrawals.on_new = lambda name, version, seen: warnings.turned_bad(
        name, version, "withdrawn", f"by the public registry, first seen {seen}")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Handlers on the running loop (never `signal.signal`, whose handler can run between any two
    # bytecodes) that only set an event: the stop itself is ordinary coroutine code.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    worker_task: asyncio.Task[None] | None = None
    worker_stop = asyncio.Event()
    tasks = health.tasks
    tasks.stop = worker_stop
    feeds = _Feeds(rules, metrics, worker_stop, tasks)
    async with _listening(app, host, port, settings, metrics) as runner:
        # each ends with worker_stop; one that dies is started again (`tasks`)
        keeping = tasks.keep("state-store", lambda: facts.run(worker_stop))
        logging_pulls = tasks.keep("pull-log", lambda: pulls.run(worker_stop))
        warning = tasks.keep("exposure-warnings", lambda: warnings.run(worker_stop))
        feeds.follow(rules.current)
        watcher = tasks.keep("rules-watcher",
                             lambda: rules.watch(worker_stop, on_reload=feeds.follow))
        if shape.runs_worker:
            assert health.heartbeat is not None
            target: MirrorTarget = open_target(
                settings.mirror_target, upstreams.target,
                max_tarball_bytes=settings.max_tarball_bytes)
            worker = Worker(WorkerDeps(settings=settings.worker, queue=queue,
                                       public=upstreams.public, target=target, metrics=metrics,
                                       heartbeat=health.heartbeat, rules=rules,
                                       packuments=packuments, withdrawals=withdrawals,
                                       release=gate.release, handoff=handoff))
            # not kept by `tasks`: its death stops the process (`worker_crashed` below)
            worker_task = asyncio.create_task(worker.run(worker_stop), name="mirror-worker")
        health.ready = True
        runtime.freeze_startup()
        # a person starting it reads where to point npm and where to look
        entry = ({"registry": settings.registry_url, "status_page": settings.status_url}
                 if shape.serves else {})
        log.info("started", command=shape.command, shape=shape.value, listen=f"{host}:{port}",
                 **entry, queue=queue.provider,
                 worker=shape.runs_worker, public_upstream=settings.public_upstream,
                 private_upstream=settings.private_upstream,
                 mirror_target=settings.mirror_target if shape.runs_worker else None,
                 tracing=tracing.enabled(),
                 notify=notifier.shown if notifier is not None else None)
        stopped = asyncio.create_task(stop.wait())
        waits: set[asyncio.Future[object]] = {stopped}  # type: ignore[arg-type]
        if worker_task is not None:
            waits.add(worker_task)  # type: ignore[arg-type]
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if worker_task is not None and worker_task in done and not stop.is_set():
            error = worker_task.exception()
            log.error("worker_crashed", error=repr(error))
            stop.set()
        stopped.cancel()
        # The stop: /readyz turns 503, the listener closes, in-flight requests and the worker's
        # job in hand get MIRRORGATE_DRAIN_TIMEOUT (the worker releases what it cannot finish);
        # then `_run` flushes and closes the queue, and the process exits 0.
        health.draining = True
        log.info("draining", timeout=settings.drain_timeout)
        worker_stop.set()
        shutdowns = [runner.cleanup()]
        if worker_task is not None and not worker_task.done():
            shutdowns.append(_await_worker(worker_task, settings.drain_timeout))
        await asyncio.gather(*shutdowns)
    await feeds.close()
    await keeping  # it ends with worker_stop, after a last write of what was learned
    await logging_pulls
    await warning
    await pulls.flush()  # the pulls of the requests drained above, before the store closes
    if handoff is not None:
        handoff.close()
    await gate.close()
    await watcher  # it ends with worker_stop
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    log.info("stopped", command=shape.command, shape=shape.value)
    return 0


async def _await_worker(task: asyncio.Task[None], drain_timeout: float) -> None:
    # The worker honours the drain timeout itself; this bound only guards against a bug.
    try:
        await asyncio.wait_for(task, drain_timeout + 5)
    except TimeoutError:
        log.error("worker_stop_overran", timeout=drain_timeout)


def _start_tracing(shape: Shape) -> tuple[tracing.Plan, str | None]:
    """The SDK, when the OTEL_* variables ask for traces (`tracing.plan`); the problem, when
    they ask for what cannot be done. Imported here only: off, no OpenTelemetry module loads."""
    traces = tracing.plan()
    for value in traces.secrets:  # a collector's API key, in OTEL_EXPORTER_OTLP_HEADERS
        register_secret(value)
    if not traces.on:
        return traces, traces.problem
    try:
        from mirrorgate import _otel

        tracing.install(_otel.start(traces.exporter or "otlp", shape=shape.value))
    except Exception as error:  # a bad OTEL_* value the SDK refuses: serve without traces
        return traces, f"the OpenTelemetry SDK did not start: {type(error).__name__}: {error}"
    return traces, None


def run(settings: Settings, shape: Shape) -> int:
    for secret in settings.secrets():  # a secret that reaches a log line is scrubbed from it
        register_secret(secret.reveal())
    traces, problem = _start_tracing(shape)
    configure_logging(settings.log_level, settings.log_format, extra=tracing.log_processors())
    for unknown in unknown_variables():
        log.warning("config_variable_unknown", variable=unknown.name,
                    suggestion=unknown.suggestion, reason=unknown.warning())
    for warning in settings.warnings():
        log.warning("config_warning", reason=warning)
    if problem is not None:
        log.warning("tracing_unavailable", reason=problem)
    elif tracing.enabled():
        log.info("tracing_started", exporter=traces.exporter, endpoint=traces.endpoint,
                 service_name=traces.service_name, sampler=traces.sampler)
    factory, loop_name = runtime.loop_factory(settings.event_loop)
    runtime.tune_allocator()  # before the first thread (a fill's parse) makes an arena
    runtime.tune_collector()
    runtime.inflate_with_isal()
    log.info("runtime", event_loop=loop_name, gc_threshold=list(runtime.THRESHOLDS))
    try:
        with asyncio.Runner(loop_factory=factory) as loop:
            return loop.run(_run(settings, shape))
    except StartupError as error:
        log.error("startup_refused", reason=str(error))
        return 2
    except StoreError as error:
        log.error("startup_refused", reason=str(error))
        return 2
    finally:
        tracing.stop()  # the last spans out, bounded
