"""A queue as clients of the previous on-disk format (2) left it."""

from __future__ import annotations

import json

import vsqs
from vsqs import _names as names
from vsqs.testing import FakeClock

#: The config a format-2 client wrote (``QueueConfig.to_json`` of format 2):
#: the six settings of then, sorted, one per line, and its format.
FORMAT_2_CONFIG = {
    "dead_letter": None,
    "format": 2,
    "max_message_size": 268435456,
    "max_receives": None,
    "max_retry_delay": 300.0,
    "retry_delay": 1.0,
    "visibility_timeout": 30.0,
}
BODIES = [f"job {i}".encode() for i in range(12)]
#: How long the first message is still held by the format-2 client that received it.
HELD_MS = 3_600_000


def config_bytes(doc: dict[str, object]) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def write_format_2(store: vsqs.Store, clock: FakeClock, config: dict[str, object]) -> list[str]:
    """A queue as format-2 clients left it: their config, and messages under
    plain ids (no tag), one of them received once and in flight for an
    hour from now (``clock``'s, as the store's clients read it). Returns the ids, in send order."""
    store.ensure(True)
    store.write_new(names.CONFIG_NAME, config_bytes(config), fsync=False)
    ids = names.IdGenerator()
    sent_ms = store.ms_clock(clock).now_ms() - 60_000  # on object stores: the store's time
    out = [ids.next_id(sent_ms) for _ in BODIES]
    held = names.invisible_name(out[0], sent_ms + 60_000 + HELD_MS, 1, 1)
    for i, (message_id, data) in enumerate(zip(out, BODIES, strict=True)):
        store.write_new(held if i == 0 else message_id, data, fsync=False)
    return out
