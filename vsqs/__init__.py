"""vsqs: a broker-less message queue where a queue is a directory and a
message is a file whose name is its state.

    >>> import vsqs
    >>> q = vsqs.Queue("/tmp/vsqs-doc/jobs")
    >>> q.send(b"hello")  # doctest: +SKIP
    >>> msg = q.receive(wait=5)
    >>> msg.delete()
"""

from __future__ import annotations

from ._errors import (
    ClockSkew,
    InvalidArgument,
    InvalidBody,
    InvalidQueueName,
    InvalidReceipt,
    MessageTooLarge,
    NotAQueue,
    QueueClosed,
    QueueConfigError,
    QueueNotEmpty,
    QueueNotFound,
    QueuePermissionError,
    ReceiptExpired,
    StorageError,
    UnsupportedStore,
    VsqsError,
)
from ._message import (
    DeadLettered,
    DeletedQueue,
    DeleteResult,
    ExtendResult,
    Message,
    QueueStats,
    ReleaseResult,
    Settled,
)
from ._move import move
from ._names import FORMAT_VERSION
from ._outgoing import Outgoing
from ._queue import Queue
from ._redrive import redrive
from .stores._base import Store
from .stores._local import LocalStore
from .stores._memory import MemoryStore
from .stores._registry import list_queues

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "ClockSkew",
    "DeadLettered",
    "DeleteResult",
    "DeletedQueue",
    "ExtendResult",
    "InvalidArgument",
    "InvalidBody",
    "InvalidQueueName",
    "InvalidReceipt",
    "LocalStore",
    "MemoryStore",
    "Message",
    "MessageTooLarge",
    "NotAQueue",
    "Outgoing",
    "Queue",
    "QueueClosed",
    "QueueConfigError",
    "QueueNotEmpty",
    "QueueNotFound",
    "QueuePermissionError",
    "QueueStats",
    "ReceiptExpired",
    "ReleaseResult",
    "Settled",
    "StorageError",
    "Store",
    "UnsupportedStore",
    "VsqsError",
    "list_queues",
    "move",
    "redrive",
]


def __getattr__(name: str) -> object:
    if name in ("aio", "stores"):  # without importing asyncio or fsspec for every user
        import importlib

        return importlib.import_module(f"vsqs.{name}")
    raise AttributeError(f"module 'vsqs' has no attribute {name!r}")
