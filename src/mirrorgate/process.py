"""Running a mirrorgate process: wiring its parts, serving, and stopping gracefully.

asyncio's signal pitfalls decided the shape: handlers are installed on the running loop with
`add_signal_handler` (never `signal.signal`, whose handler could run between any two
bytecodes), and they only set an event; the stop sequence itself runs as ordinary coroutine
code. On SIGTERM or SIGINT: `/readyz` turns 503, the listener stops accepting, in-flight
requests get `drain_timeout` to finish, then the queue is closed and the process exits 0.
"""

from __future__ import annotations

import asyncio
import signal

import structlog
from aiohttp import web

from mirrorgate.backends import QueueUnavailableError, open_queue
from mirrorgate.config import Settings
from mirrorgate.healthz import Health, add_health_routes
from mirrorgate.logs import configure_logging, register_secret
from mirrorgate.metrics import Metrics

__all__ = ["run"]

log = structlog.get_logger("mirrorgate")


async def _serve(settings: Settings, command: str, with_worker: bool) -> int:
    metrics = Metrics()
    health = Health()
    try:
        queue = await open_queue(settings.queue, on_drop=lambda total: log.warning(
            "mirror_queue_dropped", dropped=total, cap=settings.queue.max_depth))
    except QueueUnavailableError as error:
        log.error("queue_unavailable", reason=str(error))
        return 2
    metrics.watch_queue(queue.stats, queue.provider)
    app = web.Application()
    add_health_routes(app, health, metrics)
    host, port = settings.listen if command == "serve" else settings.worker_listen
    runner = web.AppRunner(app, shutdown_timeout=settings.drain_timeout, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    health.ready = True
    log.info("started", command=command, listen=f"{host}:{port}", queue=queue.provider,
             worker=with_worker)
    await stop.wait()
    health.draining = True
    log.info("draining", timeout=settings.drain_timeout)
    await runner.cleanup()
    await queue.close()
    log.info("stopped")
    return 0


def run(settings: Settings, command: str, with_worker: bool) -> int:
    configure_logging(settings.log_level, settings.log_format)
    if settings.private_token is not None:
        register_secret(settings.private_token.reveal())
    return asyncio.run(_serve(settings, command, with_worker))
