"""The vsqs error hierarchy.

Every error vsqs raises on purpose derives from :class:`VsqsError`. Errors that
mirror a builtin also subclass it (``except FileNotFoundError`` keeps working),
and every error survives pickling, so Spark executors and multiprocessing
workers can ship them back to a driver.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "VsqsError",
    "InvalidArgument",
    "InvalidBody",
    "MessageTooLarge",
    "InvalidQueueName",
    "InvalidReceipt",
    "ReceiptExpired",
    "QueueNotFound",
    "NotAQueue",
    "QueuePermissionError",
    "QueueConfigError",
    "UnsupportedStore",
    "ClockSkew",
    "QueueClosed",
    "StorageError",
    "storage_errors",
]


class VsqsError(Exception):
    """Root of every error raised by vsqs.

    Subclasses take a single message argument, so ``pickle`` round-trips them
    (with the attributes set on them, such as ``sent``).
    """

    #: On an error of ``send`` or ``send_batch``: the ids of the messages of
    #: the call that were sent (published) before it failed, in batch order.
    sent: list[str]


class InvalidArgument(VsqsError, ValueError):
    """An argument has the wrong value: a negative or NaN timeout, a bad count."""


class InvalidBody(InvalidArgument, TypeError):
    """A message body that is not ``bytes``, ``bytearray``, ``memoryview`` or a
    ``str`` that encodes to UTF-8 (a lone surrogate does not)."""


class MessageTooLarge(InvalidArgument):
    """A body larger than the queue's ``max_message_size``: refused before
    anything is written."""


class InvalidQueueName(InvalidArgument):
    """A queue URL, path or name that vsqs refuses before touching storage."""


class InvalidReceipt(InvalidArgument):
    """A receipt that is not an in-flight message name of the format.

    Raised before the receipt reaches storage: it never becomes a path.
    """


class ReceiptExpired(VsqsError, LookupError):
    """The receipt is no longer the message's current name.

    The message was deleted, or its visibility expired and someone else received
    it, or the holder itself changed it. Nothing was changed on storage.
    """


class QueueNotFound(VsqsError, FileNotFoundError):
    """The queue does not exist and ``create=False`` was given."""


class NotAQueue(VsqsError, NotADirectoryError):
    """The queue location exists but is not a queue (a plain file, or a foreign config)."""


class QueuePermissionError(VsqsError, PermissionError):
    """Storage refused the operation (read-only directory, missing credentials)."""


class QueueConfigError(VsqsError, ValueError):
    """The queue's config object is unreadable, of an unknown format version, or
    disagrees with the defaults this client was asked to open the queue with."""


class UnsupportedStore(VsqsError):
    """The URL's store cannot host a queue (unknown scheme, missing extra, or a
    store that cannot make claims exclusive)."""


class ClockSkew(VsqsError):
    """This host's clock is further from the object store's than vsqs allows
    (docs/protocol.md, "Whose clock decides expiry"): synchronise it."""


class QueueClosed(VsqsError):
    """The :class:`vsqs.Queue` was closed: every call on it raises this (a
    long poll under way in another thread ends at once)."""


class QueueNotEmpty(VsqsError):
    """A queue to delete still holds messages (delete them, or force it)."""


class StorageError(VsqsError, OSError):
    """Any other failure of the underlying storage."""


class storage_errors:
    """Re-raise an ``OSError`` of a store as the matching :class:`VsqsError`.

    ``where`` says what was being done (a callable is asked only on failure,
    so it can say how far the work got). A ``VsqsError`` passes unchanged.
    A class named like a function (it is used like one), not a generator:
    it sits on every receive and acknowledgement.
    """

    __slots__ = ("where",)

    def __init__(self, where: str | Callable[[], str]) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if not isinstance(exc, OSError) or isinstance(exc, VsqsError):
            return
        what = self.where() if callable(self.where) else self.where
        if isinstance(exc, PermissionError):
            raise QueuePermissionError(f"{what}: {exc}") from exc
        if isinstance(exc, NotADirectoryError):
            raise NotAQueue(f"{what}: not a queue directory") from exc
        raise StorageError(f"{what}: {exc}") from exc
