"""The one place a `MirrorQueue` is chosen from settings: `open_queue`.

Each backend's module is imported only when selected, so an SQS deployment never imports the
Pub/Sub client and the memory default needs neither extra installed.
"""

from __future__ import annotations

from mirrorgate.backends._shared import DropHook, ignore_drop
from mirrorgate.config import PROVIDERS, QueueSettings
from mirrorgate.errors import MirrorgateError
from mirrorgate.mirror import MirrorQueue

__all__ = ["PROVIDERS", "QueueUnavailableError", "open_queue"]


class QueueUnavailableError(MirrorgateError):
    """The selected backend cannot start (no such queue, no credentials, endpoint unreachable);
    the message says what to set or check."""


async def open_queue(
    settings: QueueSettings,
    on_drop: DropHook = ignore_drop,
) -> MirrorQueue:
    provider = settings.provider
    if provider == "memory":
        from mirrorgate.backends.memory import MemoryQueueSettings, bounded_memory_queue

        memory = MemoryQueueSettings(settings.max_depth, float(settings.poll_wait))
        return bounded_memory_queue(memory, on_drop)
    if provider == "sqs":
        try:
            from mirrorgate.backends.sqs import open_sqs_queue
        except ImportError as error:
            raise QueueUnavailableError(
                f"MIRROR_QUEUE_PROVIDER=sqs needs the sqs extra ({error.name} is missing); "
                "install it with: pip install 'mirrorgate[sqs]'"
            ) from None
        return await open_sqs_queue(settings, on_drop)
    if provider == "pubsub":
        try:
            from mirrorgate.backends.pubsub import open_pubsub_queue
        except ImportError as error:
            raise QueueUnavailableError(
                f"MIRROR_QUEUE_PROVIDER=pubsub needs the pubsub extra ({error.name} is missing); "
                "install it with: pip install 'mirrorgate[pubsub]'"
            ) from None
        return await open_pubsub_queue(settings, on_drop)
    raise QueueUnavailableError(
        f"MIRROR_QUEUE_PROVIDER={provider!r} is not a queue backend; "
        f"valid providers are {', '.join(PROVIDERS)}"
    )
