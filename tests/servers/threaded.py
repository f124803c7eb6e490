"""An aiohttp application served from its own thread: every hand-written HTTP server the tests run.

The fixture registry, the publish gate in front of Verdaccio and the faults suite's upstreams
(a body that never ends, a gzip bomb, fifty thousand generated versions, a target that never
answers) differ only in their routes. How they run is the same, and it is here:

- on their own event loop in a daemon thread, started and stopped by plain blocking calls, so
  they keep answering while a test blocks its own loop (a synchronous HTTP call,
  `subprocess.run(["npm", ...])`);
- on a port chosen once, so `stop()` and `start()` bring the server back on the same URL (an
  upstream going down and coming back); a port already taken fails `start()` with the bind
  error;
- `build()` is called in the server's thread, once per `start()`, with that thread's loop
  current, so the application and what it creates (events, a client session in a
  `cleanup_ctx`) belong to that loop;
- `stop()` closes the listener, runs the application's cleanup and cancels whatever still runs
  (a handler that hangs or is held), so nothing outlives the test.

Use it as it is (`ThreadedApp(build, name=...)`) or subclass it, passing a bound method as
`build`, when the server also carries state a test reads (requests seen, bytes sent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Self

from aiohttp import web

from tests.servers.ports import free_port

__all__ = ["ThreadedApp"]

START_WITHIN = 10.0
STOP_WITHIN = 10.0


async def _shut_down(runner: web.AppRunner) -> None:
    """Close the listener and connections, run the app's cleanup, then cancel the rest."""
    await runner.cleanup()
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class ThreadedApp:
    """Serve the application `build()` returns on `host`:`port`; `with` starts and stops it."""

    def __init__(self, build: Callable[[], web.Application], *, host: str = "127.0.0.1",
                 port: int | None = None, name: str = "threaded-app") -> None:
        self.build = build
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        """The base URL, with a trailing slash: `http://127.0.0.1:PORT/`."""
        return f"http://{self.host}:{self.port}/"

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's loop, for `call_soon_threadsafe` from the test's thread."""
        if self._loop is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._loop

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} on port {self.port} is already running")
        ready: concurrent.futures.Future[asyncio.AbstractEventLoop] = concurrent.futures.Future()
        thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                  name=f"{self.name}-{self.port}")
        thread.start()
        try:
            self._loop = ready.result(timeout=START_WITHIN)
        except BaseException:
            thread.join(timeout=5)
            raise
        self._thread = thread
        return self

    def stop(self) -> None:
        """Stop listening and drop every connection (a handler still running is cancelled)."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=STOP_WITHIN)
        self._thread = self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _serve(self, ready: concurrent.futures.Future[asyncio.AbstractEventLoop]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner: web.AppRunner | None = None
        try:
            runner = web.AppRunner(self.build(), access_log=None, handle_signals=False,
                                   shutdown_timeout=0.2)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True, backlog=1024)
            loop.run_until_complete(site.start())
        except BaseException as error:
            if runner is not None:
                loop.run_until_complete(runner.cleanup())
            loop.close()
            ready.set_exception(error)
            return
        ready.set_result(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_shut_down(runner))
            loop.close()
