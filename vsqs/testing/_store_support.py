"""Names and threads of the store-level conformance suites (shared by its modules)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import vsqs
from vsqs import _names as names

#: The expiry of the names that messages are renamed to here (ms; any will do).
EXPIRY_MS = 1_750_000_000_000
#: Threads of the racing and concurrency tests.
THREADS = 8


def fresh_id() -> str:
    """A message id no test has used (the process's generator, on the wall clock)."""
    return names.id_generator(time.time).next_id(int(time.time() * 1000))


def fresh_queue(prefix: str) -> str:
    """A queue name no test has used (``prefix`` and a fresh id's time and sequence)."""
    return f"{prefix}-{fresh_id()[:18]}"


def ready() -> str:
    """A fresh ready name (a message as sent)."""
    return names.published_name(fresh_id(), None)


def held(name: str, count: int = 1, *, later_ms: int = 0) -> str:
    """The name ``name`` takes when it is received (``count`` times): the next version."""
    parsed = names.parse(name)
    assert parsed is not None, name
    return names.next_name(parsed, EXPIRY_MS + later_ms, count)


def listed(store: vsqs.Store, prefix: str = "") -> list[str]:
    return sorted(store.list(prefix=prefix))


def run_threads(count: int, target: Callable[[int], None]) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads that start together; their errors."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return errors
