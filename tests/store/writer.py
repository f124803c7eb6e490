"""A separate process writing facts one transaction at a time (`harness.writer_argv`)."""

from __future__ import annotations

import asyncio
import sys

from mirrorgate.store import FIRST_PARTY, Fact
from tests.store.harness import open_spec


async def main(spec: str, prefix: str, count: int) -> None:
    store = await open_spec(spec)
    try:
        for number in range(count):
            key = f"{prefix}-{number}"
            await store.put_facts([Fact(FIRST_PARTY, key, "")])
            print(key, flush=True)  # acknowledged: the write returned
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
