"""Settling receipts: what :meth:`vsqs.Queue.delete`, ``delete_batch``,
``extend`` and ``release`` do with a message this client holds.

Every change is one rename or delete of the receipt's name: it proves the
receipt current, or changes nothing and raises :class:`ReceiptExpired`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

from . import _meter as meter
from . import _names as names
from ._bundled import PLACE_SEPARATOR, Part, Parts, bare_part, part_of, stale_receipt
from ._config import seconds
from ._dead_letter import remove_records
from ._envelope import read_limit
from ._errors import InvalidArgument, ReceiptExpired, StorageError, storage_errors
from ._fanout import fan_out
from ._message import DeleteResult, ExtendResult, Message, Owner, ReleaseResult, hold
from .stores._base import Store

#: Bundled items of a batch by the part that holds them: ``(index, place)`` each.
ByPart = dict[Part, list[tuple[int, int]]]

T = TypeVar("T")
R = TypeVar("R")


class Tracker(Protocol):
    """What a receiver learns of this client's settlements (its candidate cache)."""

    def moved(self, old: str, new: str, expiry_ms: int) -> None: ...

    def deleted(self, name: str) -> None: ...


class Settler:
    """Deletes, extends and releases the receipts of one queue (``owner``)."""

    def __init__(self, owner: Owner, store: Store, clock: names.MsClock, tracker: Tracker) -> None:
        self._owner = owner
        self._store = store
        self._clock = clock
        self._tracker = tracker
        self._parts = Parts(store, clock, owner, tracker.moved, tracker.deleted)

    def delete(self, msg_or_receipt: Message | str) -> None:
        """See :meth:`vsqs.Queue.delete`."""
        observer = meter.observer  # one for both calls: metrics may be enabled meanwhile
        started = 0.0 if observer is meter.OFF else observer.clock()
        bundled = self._bundled(msg_or_receipt)
        if bundled is not None:
            if self._parts.ack(bundled[0], [bundled[1]]):
                raise ReceiptExpired(f"cannot delete: {self._stale(bundled[0].name)}")
        else:
            self._ack(self._ack_target(msg_or_receipt))
        if observer is not meter.OFF:
            observer.operation(self._owner.url, "delete", started)

    def delete_batch(self, msgs_or_receipts: Iterable[Message | str]) -> DeleteResult:
        """See :meth:`vsqs.Queue.delete_batch`: bundled messages with one
        change per part that holds them."""
        observer = meter.observer
        started = 0.0 if observer is meter.OFF else observer.clock()
        items = list(msgs_or_receipts)
        parts, alone = self._by_part(items)
        targets = [self._ack_target(items[i]) for i in alone]
        given = self._given(items)
        done, stale, failed = self._batch(self._ack, targets, [t[0] for t in targets])
        acked = self._part_batch(lambda part, places: self._parts.ack(part, places), parts, items)
        if observer is not meter.OFF:
            observer.operation(self._owner.url, "delete_batch", started)
        return DeleteResult(
            _ordered([r for r, _ in done + acked[0]], given),
            _ordered(stale + acked[1], given),
            failed | acked[2],
        )

    def extend_batch(
        self, msgs_or_receipts: Iterable[Message | str], visibility_timeout: float, max_size: int
    ) -> ExtendResult:
        """See :meth:`vsqs.Queue.extend_batch`."""
        vt_ms = int(seconds(visibility_timeout, "visibility_timeout") * 1000)
        items = list(msgs_or_receipts)
        parts, alone = self._by_part(items, bare=False)  # a bare receipt's message is made
        receipts = [self._receipt_of(items[i]) for i in alone]  # each checked first
        given = self._given(items)
        done, stale, failed = self._batch(
            lambda i: (i, self.extend(items[i], visibility_timeout, max_size)), alone, receipts
        )
        extended = [found for _, found in done]
        where = {id(item): i for i, item in enumerate(items)}

        def extend(part: Part, places: list[int]) -> list[int]:
            expiry = self._clock.expiry_ms(vt_ms)
            moved, missed = self._parts.move(part, places, expiry, "extend", holds=True)
            extended.extend((where[id(m)], m) for m in moved)
            return missed

        _, more_stale, more_failed = self._part_batch(extend, parts, items)
        return ExtendResult(
            [m for _, m in sorted(extended, key=lambda found: found[0])],
            _ordered(stale + more_stale, given),
            failed | more_failed,
        )

    def release_batch(
        self, msgs_or_receipts: Iterable[Message | str], *, delay: float = 0
    ) -> ReleaseResult:
        """See :meth:`vsqs.Queue.release_batch`."""
        delay_ms = int(seconds(delay, "delay") * 1000)
        items = list(msgs_or_receipts)
        parts, alone = self._by_part(items)
        receipts = [self._receipt_of(items[i]) for i in alone]
        given = self._given(items)
        done, stale, failed = self._batch(
            lambda i: self.release(items[i], delay=delay), alone, receipts
        )
        released = self._part_batch(
            lambda part, places: self._parts.move(
                part, places, self._clock.expiry_ms(delay_ms), "release", holds=False
            )[1],
            parts,
            items,
        )
        return ReleaseResult(
            _ordered([r for r, _ in done] + [r for r, _ in released[0]], given),
            _ordered(stale + released[1], given),
            failed | released[2],
        )

    @staticmethod
    def _given(items: list[Message | str]) -> list[str]:
        """Each item's receipt as given, before anything changes it."""
        return [item if isinstance(item, str) else item.receipt or "" for item in items]

    def _bundled(self, item: Message | str) -> tuple[Part, int] | None:
        """The part that holds a bundled message (or that a bare receipt of one
        names) and its place; ``None`` for a message alone."""
        if isinstance(item, Message):
            self._check_own(item)
            return part_of(item)
        if isinstance(item, str) and PLACE_SEPARATOR in item:
            return bare_part(item)
        return None

    def _by_part(
        self, items: list[Message | str], *, bare: bool = True
    ) -> tuple[ByPart, list[int]]:
        """The bundled items of a batch by part (bare receipts of one held name
        share one; with ``bare`` false, they go with the others), and the
        indexes of the others."""
        parts: ByPart = {}
        named: dict[str, Part] = {}  # one change per part name, never two at once
        alone: list[int] = []
        for i, item in enumerate(items):
            found = self._bundled(item)
            if found is None or (not bare and not isinstance(item, Message)):
                alone.append(i)
                continue
            part, place = found
            known = named.setdefault(part.name, part)
            if known is not part and isinstance(item, Message):  # a message's part: its own
                parts[part] = parts.pop(known, [])
                named[part.name] = known = part
            parts.setdefault(known, []).append((i, place))
        return parts, alone

    def _part_batch(
        self,
        settle: Callable[[Part, list[int]], list[int]],
        parts: ByPart,
        items: list[Message | str],
    ) -> tuple[list[tuple[str, None]], list[str], dict[str, StorageError]]:
        """Run ``settle(part, places)`` (which returns the stale places) once
        per part, side by side; the receipts of the items done, stale and
        failed, in the order of ``items``. Any other error is raised."""
        groups = list(parts.items())
        # The receipts as they were given: a settle changes a message's own.
        given = {
            i: item if isinstance(item, str) else item.receipt or ""
            for _, places in groups
            for i, _ in places
            for item in [items[i]]
        }
        outcomes = fan_out(
            lambda group: settle(group[0], [p for _, p in group[1]]),
            groups,
            self._store.batch_width,
        )
        done: list[int] = []
        stale: list[int] = []
        failed: dict[str, StorageError] = {}
        for (_, places), outcome in zip(groups, outcomes, strict=True):
            error = outcome.exception()
            if error is None:
                missed = set(outcome.result())
                for i, p in places:  # a message given twice is settled once: then stale
                    (stale if p in missed else done).append(i)
                    missed.add(p)
            elif isinstance(error, ReceiptExpired):
                stale += [i for i, _ in places]
            elif isinstance(error, StorageError):
                failed.update(dict.fromkeys((given[i] for i, _ in places), error))
            else:
                raise error
        return [(given[i], None) for i in sorted(done)], [given[i] for i in sorted(stale)], failed

    def _batch(
        self, settle: Callable[[T], R], items: list[T], receipts: list[str]
    ) -> tuple[list[tuple[str, R]], list[str], dict[str, StorageError]]:
        """Run ``settle`` on every item, side by side where the store's
        requests are; sort the outcomes by receipt: done (with the result),
        stale, failed. Any other error is raised."""
        done: list[tuple[str, R]] = []
        stale: list[str] = []
        failed: dict[str, StorageError] = {}
        outcomes = fan_out(settle, items, self._store.batch_width)
        for receipt, outcome in zip(receipts, outcomes, strict=True):
            error = outcome.exception()
            if error is None:
                done.append((receipt, outcome.result()))
            elif isinstance(error, ReceiptExpired):
                stale.append(receipt)
            elif isinstance(error, StorageError):
                failed[receipt] = error
            else:
                raise error
        return done, stale, failed

    def _receipt_of(self, msg_or_receipt: Message | str) -> str:
        """The receipt of an item of a batch, checked as a single call checks it."""
        bundled = self._bundled(msg_or_receipt)
        if bundled is not None:  # checked: a bundled message's own, or a bare one's
            return (
                msg_or_receipt if isinstance(msg_or_receipt, str) else msg_or_receipt.receipt or ""
            )
        parsed, _ = self._held(msg_or_receipt)
        return names.receipt_name(parsed)

    def extend(
        self,
        msg_or_receipt: Message | str,
        visibility_timeout: float,
        max_size: int,
    ) -> Message:
        """See :meth:`vsqs.Queue.extend`; ``max_size``: the largest body it reads."""
        vt_ms = int(seconds(visibility_timeout, "visibility_timeout") * 1000)
        bundled = self._bundled(msg_or_receipt)
        if bundled is not None:
            return self._parts.extend(bundled, msg_or_receipt, self._clock.expiry_ms(vt_ms))
        parsed, message = self._held(msg_or_receipt)
        if message is None:
            # The body before the rename: the rename alone decides the
            # outcome (a read after it could find the name already expired
            # and taken, and call an extend that took effect stale).
            receipt = names.receipt_name(parsed)
            with storage_errors(f"reading from {self._owner.url}"):
                try:
                    body = self._store.read_limited(receipt, read_limit(parsed.id, max_size))
                except FileNotFoundError:
                    raise ReceiptExpired(f"cannot extend: {self._stale(receipt)}") from None
            new = self._move_held(parsed, self._clock.expiry_ms(vt_ms), "extend", holds=True)
            return Message(self._owner, parsed.id, body, new, parsed.receive_count)
        with hold(message).lock:
            parsed = names.parse_receipt(message.receipt)
            new = self._move_held(parsed, self._clock.expiry_ms(vt_ms), "extend", holds=True)
            message.receipt = hold(message).issued = new
            return message

    def release(self, msg_or_receipt: Message | str, *, delay: float = 0) -> None:
        """See :meth:`vsqs.Queue.release`."""
        delay_ms = int(seconds(delay, "delay") * 1000)
        bundled = self._bundled(msg_or_receipt)
        if bundled is not None:
            part, place = bundled
            expiry = self._clock.expiry_ms(delay_ms)
            if self._parts.move(part, [place], expiry, "release", holds=False)[1]:
                raise ReceiptExpired(f"cannot release: {self._stale(part.name)}")
            return
        parsed, message = self._held(msg_or_receipt)
        with self._locked(message):
            if message is not None:
                parsed = names.parse_receipt(message.receipt)
            self._move_held(parsed, self._clock.expiry_ms(delay_ms), "release", holds=False)
            if message is not None:
                hold(message).done = True

    def _check_own(self, message: Message) -> None:
        owner = hold(message).queue
        if owner is not self._owner and owner.url != self._owner.url:
            raise InvalidArgument("that message belongs to another queue")
        if message.receipt is None:
            raise InvalidArgument("a peeked message has no receipt")

    def _held(self, msg_or_receipt: Message | str) -> tuple[names.Name, Message | None]:
        """The name a receipt stands for, and the message if one was given (checked to be ours)."""
        if not isinstance(msg_or_receipt, Message):
            return names.parse_receipt(msg_or_receipt), None
        self._check_own(msg_or_receipt)
        return names.parse_receipt(msg_or_receipt.receipt), msg_or_receipt

    @staticmethod
    def _locked(message: Message | None) -> AbstractContextManager[Any]:
        return hold(message).lock if message is not None else nullcontext()

    def _move_held(self, parsed: names.Name, expiry_ms: int, what: str, *, holds: bool) -> str:
        """Rename a held message to a new expiry; return the new name.

        The new name has the next version, so it differs from the receipt (and
        from every earlier name of the message): the atomic rename itself
        proves the receipt is still current. A move that ``holds`` on to the
        message (an extend) never takes the last version: it is kept for the
        release (:func:`~vsqs._names.can_hold`).
        """
        receipt = names.receipt_name(parsed)
        if holds and not names.can_hold(parsed):
            raise InvalidArgument(
                f"cannot {what}: {receipt} has no name left but the one to release it to "
                "(docs/format.md, names): release or delete it"
            )
        lapsed = (parsed.expiry_ms or 0) <= self._clock.now_ms()
        if holds and parsed.group is not None and lapsed:
            # Its group was free once its timeout ran out: another message of
            # it may be in flight now, which an extend would not see.
            raise ReceiptExpired(
                f"cannot {what}: the visibility timeout of {receipt} ran out, and its group "
                "may have moved on (docs/groups.md)"
            )
        new = names.next_name(parsed, expiry_ms, parsed.receive_count)
        with storage_errors(f"{what} in {self._owner.url}"):
            try:
                self._store.rename(receipt, new)
            except (FileNotFoundError, FileExistsError):
                raise ReceiptExpired(f"cannot {what}: {self._stale(receipt)}") from None
        self._tracker.moved(receipt, new, expiry_ms)
        return new

    def _ack_target(self, msg_or_receipt: Message | str) -> tuple[str, Message | None]:
        """The receipt to acknowledge (checked: InvalidReceipt, InvalidArgument) and its message."""
        if not isinstance(msg_or_receipt, Message):
            if not names.is_receipt(msg_or_receipt):
                names.parse_receipt(msg_or_receipt)  # raises InvalidReceipt with the reason
            return msg_or_receipt, None
        self._check_own(msg_or_receipt)
        return msg_or_receipt.receipt or "", msg_or_receipt

    def _ack(self, target: tuple[str, Message | None]) -> None:
        receipt, message = target
        if message is None:
            self._delete(receipt, known=False)
            return
        held = hold(message)
        with held.lock:
            current = message.receipt
            issued = current is held.issued
            if not issued:
                names.parse_receipt(current)  # changed by the caller: untrusted again
            assert current is not None
            self._delete(current, known=issued)
            held.done = True
            if held.origin:  # a dead letter with its origin records: they go with it
                remove_records(self._store, held.origin)

    def _stale(self, receipt: str) -> str:
        """Why a receipt changed nothing: a receipt cannot tell its queue."""
        return stale_receipt(receipt, self._owner.url)

    def _delete(self, receipt: str, *, known: bool) -> None:
        try:
            self._store.delete(receipt, known=known)
        except FileNotFoundError:
            raise ReceiptExpired(f"cannot delete: {self._stale(receipt)}") from None
        except OSError:
            with storage_errors(f"deleting from {self._owner.url}"):  # only when one failed
                raise
        observer = meter.observer
        if observer is not meter.OFF:
            observer.deleted(self._owner.url, receipt, self._clock.now_ms)
        self._tracker.deleted(receipt)


def _ordered(receipts: list[str], given: list[str]) -> list[str]:
    """``receipts`` in the order their items were given (a receipt given
    twice keeps both places: the first of it is the one settled)."""
    places: dict[str, list[int]] = {}
    for i, receipt in enumerate(given):
        places.setdefault(receipt, []).append(i)
    out = []
    for receipt in receipts:
        found = places.get(receipt)
        out.append((found.pop(0) if found else len(given), receipt))
    return [receipt for _, receipt in sorted(out, key=lambda found: found[0])]
