"""A simulated bucket with the exact request semantics vsqs relies on.

Three flavours, as measured on real servers (``docs/protocol.md``):

* ``aws``: S3 and moto. ``PUT`` with ``If-None-Match: *`` is an exclusive
  create (412 if the key exists), ``If-Match`` on ``PUT`` and ``DELETE`` is a
  compare-and-swap (412 on another ETag, 404 for an absent key), a plain
  ``DELETE`` of an absent key succeeds, ``CopyObject`` replaces its target.
* ``ceph``: Ceph RGW 16. Exclusive creates as above; ``If-Match`` on
  ``DELETE`` is ignored and a ``DELETE`` of an absent key succeeds.
* ``gcs``: generation preconditions. A create is ``ifGenerationMatch=0``, a
  ``DELETE`` of an absent object answers 404.

ETags are the MD5 of the bytes, so the same bytes written twice have the same
ETag; ``LastModified`` is the bucket's clock (whole milliseconds). A request is
one call; what happens to its response (lost, late, retried) is the
scheduler's business, not the bucket's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

FLAVOURS = ("aws", "ceph", "gcs")

#: One write or delete (``Bucket.changes``).
Change = tuple[float, str, str, str]


class Status(Exception):
    """An HTTP error status the bucket answers with (404, 412, 501, 503)."""

    def __init__(self, code: int, what: str = "") -> None:
        super().__init__(f"HTTP {code} {what}".strip())
        self.code = code


@dataclass
class Object:
    data: bytes
    etag: str
    modified: float  # the bucket's clock, seconds
    generation: int


@dataclass
class Bucket:
    """Keys of one bucket (``prefix/name``), and the clock that stamps them."""

    flavour: str
    now: float = 0.0
    objects: dict[str, Object] = field(default_factory=dict)
    generations: int = 0
    #: Every key ever written, with the bytes first written to it, for the oracle.
    written: dict[str, bytes] = field(default_factory=dict)
    #: When each key was first written (the bucket's clock), and by which
    #: actor's request ("" for a request whose client gave up or died), for
    #: the oracle; ``writer`` is the actor whose request takes effect now.
    born: dict[str, tuple[float, str]] = field(default_factory=dict)
    writer: str = ""
    #: Which actor sent the request that first wrote each key, whether or
    #: not its client still waited for it (an orphan's sender too: a create
    #: that landed late is still its sender's); ``issuer``: the sender of
    #: the request that takes effect now.
    issued: dict[str, str] = field(default_factory=dict)
    issuer: str = ""
    #: Every write and delete in order, for the oracle: (the bucket's time,
    #: "put", "copy" or "delete", key, ``writer``).
    changes: list[Change] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {self.flavour!r}")

    def _write(self, key: str, data: bytes, kind: str = "put") -> str:
        self.changes.append((self.now, kind, key, self.writer))
        self.generations += 1
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        self.objects[key] = Object(data, etag, round(self.now, 3), self.generations)
        self.written.setdefault(key, data)
        self.born.setdefault(key, (self.now, self.writer))
        self.issued.setdefault(key, self.issuer)
        return etag

    def _get(self, key: str) -> Object:
        found = self.objects.get(key)
        if found is None:
            raise Status(404, key)
        return found

    # ------------------------------------------------------------- requests
    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, dry_run: bool = False
    ) -> str:
        """Write ``key``; with ``dry_run``, only check the condition."""
        if if_none_match and key in self.objects:
            raise Status(412, key)
        return "" if dry_run else self._write(key, data)

    def get(self, key: str) -> bytes:
        return self._get(key).data

    def head(self, key: str) -> Object:
        return self._get(key)

    def copy(self, source: str, target: str) -> str:
        return self.land_copy(target, self._get(source).data)

    def land_copy(self, target: str, data: bytes) -> str:
        """A copy's write of ``data`` (read from its source) to ``target``."""
        return self._write(target, data, "copy")

    def delete_many(self, keys: list[str]) -> list[str]:
        """A batched delete (S3's ``DeleteObjects``, a GCS batch request); absent
        keys are no error (GCS answers them 404, which vsqs takes as deleted)."""
        for key in keys:
            if self.objects.pop(key, None) is not None:
                self.changes.append((self.now, "delete", key, self.writer))
        return []

    def list(self, prefix: str, after: str, limit: int) -> tuple[list[tuple[str, float]], bool]:
        """One page of keys under ``prefix`` (not nested), ascending, after ``after``."""
        keys = sorted(
            k for k in self.objects if k.startswith(prefix) and "/" not in k[len(prefix) :]
        )
        keys = [k for k in keys if k > after]
        page = keys[:limit]
        return [(k, self.objects[k].modified) for k in page], len(keys) > limit
