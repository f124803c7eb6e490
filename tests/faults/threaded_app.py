"""An aiohttp application served from its own thread: the faults suite's hand-written upstreams.

The fixture registry covers most faults; a few rows need an upstream it cannot play (a body
sent chunked with no Content-Length, a gzip bomb, fifty thousand generated versions served
without building a tarball per version). Such an upstream is a plain `web.Application` handed
to `ThreadedApp`, which runs it like the fixture registry runs itself:

- on its own event loop in a daemon thread, started and stopped by plain blocking calls, so it
  keeps answering while a test blocks (a synchronous HTTP call, `subprocess.run`);
- on a port chosen once, so `stop()` and `start()` bring it back on the same URL;
- `stop()` closes the listener and cancels whatever still runs (a handler that hangs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

from aiohttp import web

from tests.servers.ports import free_port

__all__ = ["ThreadedApp"]


async def _shut_down(runner: web.AppRunner) -> None:
    await runner.cleanup()
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class ThreadedApp:
    """Serve the application `build()` returns on 127.0.0.1:`port`; `with` starts and stops.

    `build` is called in the server's thread, once per `start()`, so the application (and
    anything it creates, such as events) belongs to that thread's loop.
    """

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
        """The base URL, with a trailing slash."""
        return f"http://{self.host}:{self.port}/"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._loop

    def start(self) -> ThreadedApp:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} on port {self.port} is already running")
        ready: concurrent.futures.Future[asyncio.AbstractEventLoop] = concurrent.futures.Future()
        thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                  name=f"{self.name}-{self.port}")
        thread.start()
        try:
            self._loop = ready.result(timeout=10)
        except BaseException:
            thread.join(timeout=5)
            raise
        self._thread = thread
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None

    def __enter__(self) -> ThreadedApp:
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
