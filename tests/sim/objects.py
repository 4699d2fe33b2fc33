"""``SimObjects``: vsqs's request adapter (``ObjectIO``) over a simulated bucket.

Every method sends its requests through the scheduler, as the real adapters
send them through s3fs or gcsfs, with the same client-side retries: a request
whose response was lost, that timed out or was throttled is sent again (up to
three attempts), except an exclusive create when ``retry_creates`` is off
(vsqs's adapters never let the client library re-send one).

``torn`` names requests that take effect in two steps, with anything
between them, as moto's do: ``"create"``, an exclusive create that checks
that its key is absent, then writes it (two racing creates can both win);
``"copy"``, a copy that reads its source, then writes its target (the write
can land after the source is gone). A retry repeats both steps. vsqs assumes
neither (``docs/protocol.md``, "A store whose requests are not atomic").

``stamps`` says what a listing tells of an object's modification time:
``"ms"`` (the bucket's time, as GCS lists it), ``"seconds"`` (truncated to
the second, as S3 lists it) or ``"none"`` (nothing: ``ObjectIO`` allows it;
its listing responses then tell no ``Date`` either).

A GET of a message body (not of a marker or a staged ``.new``) is marked
as such, so that ``Faults.read_error`` can fail it (a 500 after the client
library's retries, or a 403: ``scheduler.Failed``, which is not retried);
so is a delete of origin records (``Faults.record_error``). Each error a
request raises after its retries is noted (``Scheduler.fault``) for the
oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from vsqs import _names
from vsqs.stores._object_io import ObjectIO

from .bucket import Status
from .scheduler import Failed, Lost, Scheduler, Throttled, TimedOut

ATTEMPTS = 3


class SimObjects(ObjectIO):
    """One queue (``prefix``) of a simulated bucket, for one client."""

    #: The scheduler runs actors' threads only: a batch's requests go one by one.
    in_flight = 1

    def __init__(
        self,
        scheduler: Scheduler,
        prefix: str,
        *,
        scope: Hashable,
        retry_creates: bool = False,
        torn: frozenset[str] = frozenset(),
        page: int = 4,
        stamps: str = "ms",
    ) -> None:
        super().__init__()
        self.stamps = stamps
        self.scheduler, self.bucket = scheduler, scheduler.bucket
        self.prefix = prefix.rstrip("/") + "/"
        self.url = f"sim://{self.prefix.rstrip('/')}"
        self.scope, self.retry_creates, self.page = scope, retry_creates, page
        self.torn = torn
        if self.bucket.flavour == "gcs":
            self.exclusive_create_via = "gcs-generation"  # type: ignore[misc]
            self.names_per_remove = 100  # type: ignore[misc]  # a batch request
        else:
            self.names_per_remove = 1000  # type: ignore[misc]  # a DeleteObjects

    @property
    def probe_scope(self) -> Hashable:
        return ("sim", self.scope)

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _request(
        self, what: str, effect: Callable[[], Any], *, retry: bool = True, fails: str = ""
    ) -> Any:
        return self._attempts(
            what, lambda: self.scheduler.call(what, effect, fails=fails), retry=retry, fails=fails
        )

    def _torn(
        self, what: str, first: Callable[[], Any], then: Callable[[Any], Any], *, retry: bool = True
    ) -> Any:
        """One request that takes effect in two steps: ``first``, then ``then``
        with what ``first`` returned, each scheduled on its own."""

        def attempt() -> Any:
            found = self.scheduler.call(f"{what} (first step)", first)
            return self.scheduler.call(f"{what} (second step)", lambda: then(found))

        return self._attempts(what, attempt, retry=retry)

    def _attempts(self, what: str, send: Callable[[], Any], *, retry: bool, fails: str = "") -> Any:
        self.count(what.split(" ", 1)[0])
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return send()
            except (Lost, TimedOut, Throttled) as exc:
                if not retry or attempt == ATTEMPTS:
                    self.scheduler.fault(type(exc).__name__)
                    raise
            except Failed:
                self.scheduler.fault(f"{fails}_error")
                raise
        raise AssertionError("unreachable")

    def container_exists(self) -> bool:
        return True

    def listing(self, prefix: str = "") -> Iterator[tuple[str, float | None]]:
        after, start = self.prefix, self.prefix + prefix
        while True:
            page, more, date = self._request(
                f"list {self.prefix}",
                lambda a=after: (*self.bucket.list(start, a, self.page), self.bucket.now),
            )
            if self.stamps != "none":  # the Date of its response, truncated as S3's
                self.last_date = float(int(date))
            for key, modified in page:
                yield key[len(self.prefix) :], self._stamp(modified)
            if not more or not page:
                return
            after = page[-1][0]

    def store_date(self) -> float | None:
        """The bucket's time truncated to the second, as a ``HEAD``'s ``Date``
        (none where the plan's store tells no times)."""
        if self.stamps == "none":
            return None
        date: float = self._request(f"head {self.prefix}", lambda: self.bucket.now)
        actor = self.scheduler.current()
        if actor is not None:  # names are off by its steps since, for the oracle
            self.scheduler.measured[actor.name] = self.scheduler.offset(actor)
        return float(int(date))

    def _stamp(self, modified: float) -> float | None:
        if self.stamps == "seconds":
            return float(int(modified))
        return None if self.stamps == "none" else modified

    def get(self, name: str) -> bytes:
        parsed = _names.parse(name)
        body = parsed is not None and parsed.state != _names.NEW
        try:
            return self._request(  # type: ignore[no-any-return]
                f"get {self._key(name)}",
                lambda: self.bucket.get(self._key(name)),
                fails="read" if body else "",
            )
        except Status as exc:
            raise FileNotFoundError(name) from exc

    def exists(self, name: str) -> bool:
        try:
            self._request(f"head {self._key(name)}", lambda: self.bucket.head(self._key(name)))
        except Status:
            return False
        return True

    def create(self, name: str, data: bytes) -> None:
        key = self._key(name)
        try:
            if "create" in self.torn:
                self._torn(
                    f"put {key}",
                    lambda: self.bucket.put(key, b"", if_none_match=True, dry_run=True),
                    lambda _: self.bucket.put(key, data),
                    retry=self.retry_creates,
                )
            else:
                self._request(
                    f"put {key}",
                    lambda: self.bucket.put(key, data, if_none_match=True),
                    retry=self.retry_creates,
                )
        except Status as exc:
            raise FileExistsError(name) from exc

    def copy(self, src: str, dst: str) -> None:
        source, target = self._key(src), self._key(dst)
        try:
            if "copy" in self.torn:
                self._torn(
                    f"copy {source} {dst}",
                    lambda: self.bucket.get(source),
                    lambda data: self.bucket.land_copy(target, data),
                )
            else:
                self._request(f"copy {source} {dst}", lambda: self.bucket.copy(source, target))
        except Status as exc:
            raise FileNotFoundError(src) from exc

    def remove(self, names: list[str]) -> list[str]:
        """One request per ``names_per_remove`` names (S3's ``DeleteObjects``,
        a GCS batch request)."""
        failed: list[str] = []
        for start in range(0, len(names), self.names_per_remove):
            chunk = names[start : start + self.names_per_remove]
            keys = [self._key(n) for n in chunk]
            record = any(_names.origin_id(n) is not None for n in chunk)
            try:
                self._request(
                    f"deletes {keys}",
                    lambda keys=keys: self.bucket.delete_many(keys),
                    fails="record" if record else "",
                )
            except OSError:
                failed += chunk
        return failed

    def clock_offset(self) -> float | None:
        actor = self.scheduler.current()
        return -self.scheduler.offset(actor) if actor is not None else 0.0

    def sibling(self, name: str) -> SimObjects:
        parent = self.prefix.rstrip("/").rpartition("/")[0]
        return SimObjects(
            self.scheduler,
            f"{parent}/{name}",
            scope=self.scope,
            retry_creates=self.retry_creates,
            torn=self.torn,
            page=self.page,
            stamps=self.stamps,
        )
