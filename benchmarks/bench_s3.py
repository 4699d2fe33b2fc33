"""Object-store benchmarks: requests per message by store, and throughput against raw requests.

Starts a moto S3 server on 127.0.0.1 (an OS-chosen port) in a subprocess, and,
where they are installed, a single-node Ceph RGW (``.ci/install-debian``) and
fake-gcs-server, and measures, in the same run:

* per store (and so per protocol the probe picks), the requests each
  operation makes, counted by vsqs's request adapter: send, receive (claim +
  body), ack, and the listings per receive on a small and a large backlog
  (they must not grow with the backlog); and the steady state: every request
  of sending, receiving in batches of 10 and acking N messages, the batched
  deletions of acked objects and spent markers included, per message;
* on moto, vsqs's throughput (send; receive + delete with one consumer; four
  and eight consumer processes, with their requests per message) against a
  raw loop of the same requests through the same s3fs client with no queue
  logic. moto is slow and single-process, so only the ratios mean anything;
  real S3 is bound by its round-trip time instead.

* with ``--rtt MS``, on moto behind a proxy that holds every response MS
  milliseconds (a same-region round trip is 10-60 ms): messages per second,
  round trips of wall time per message and requests per message of
  ``send_batch(100)``, of ``receive_batch(10)`` + ``delete_batch`` with one
  client, and of 4 and 8 consumer processes, each message an object of its
  own; against the floor, a raw loop that sends the same requests, as wide,
  through the same proxy (s3fs's client, no queue logic); and of
  ``send_batch(100)`` + ``receive_batch(100)`` + ``delete_batch`` in
  bundles, also with no delay (what the machine costs);
* with ``--bundles``, on every store: requests per message by kind (counted
  by vsqs's adapter, and at the server by a proxy) and USD per million
  messages of one client's ``send_batch(S)``, then ``receive_batch(R)`` +
  ``delete_batch`` until empty, S/R = 100/100, 10/10, 100/10, in bundles
  and each message an object of its own, against SQS and pawn-queue (the
  full run includes it).

    python benchmarks/bench_s3.py            # default sizes, a few minutes
    python benchmarks/bench_s3.py --quick    # small sizes
    python benchmarks/bench_s3.py --rtt 20   # at a realistic latency
    python benchmarks/bench_s3.py --bundles  # the costs of bundles, every store
    python benchmarks/bench_s3.py --json figures.json
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import vsqs
from vsqs._fanout import IN_FLIGHT, POOL_THREADS
from vsqs.stores._object import ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ceph_rgw import ceph_available, ceph_rgw
from tests.support.fault_proxy import FaultProxy
from tests.support.moto_server import moto_s3
from tests.support.servers import Server, fake_gcs, proxied

BODY = b"x" * 100
ctx = multiprocessing.get_context("spawn")


def fresh_url(root: str = "s3://bench") -> str:
    return f"{root}/{uuid.uuid4().hex[:8]}/q"


def requests_of(q: vsqs.Queue) -> Counter[str]:
    store = q.store
    assert isinstance(store, ObjectStore)
    return store.io.requests


def flush(q: vsqs.Queue) -> None:
    """Send the deletions the client held back (they count in its requests)."""
    store = q.store
    assert isinstance(store, ObjectStore)
    store.flush()


#: The sends compared (issue 29): plain, with a message group (all in one
#: group), with a deduplication id (a new one per message).
KINDS = ("plain", "group", "dedup")


def outgoing(kind: str) -> vsqs.Outgoing:
    """One message of ``kind``."""
    if kind == "group":
        return vsqs.Outgoing(BODY, group="g")
    if kind == "dedup":
        return vsqs.Outgoing(BODY, dedup_id=uuid.uuid4().hex)
    return vsqs.Outgoing(BODY)


def send_one(q: vsqs.Queue, kind: str) -> None:
    item = outgoing(kind)
    q.send(item.body, group=item.group, dedup_id=item.dedup_id)


def count_requests(
    root: str, options: dict[str, Any], backlog: int, kind: str = "plain"
) -> dict[str, Any]:
    """Requests of each operation once the receiver has its candidates, every
    message sent as ``kind``."""
    with vsqs.Queue(fresh_url(root), storage_options=options) as q:
        protocol = q.protocol
        q.send_batch([outgoing(kind) for _ in range(backlog)], bundle=False)
        counts = requests_of(q)
        counts.clear()
        first = q.receive()
        assert first is not None
        first_receive = dict(counts)
        first.delete()
        counts.clear()
        send_one(q, kind)
        send = dict(counts)
        counts.clear()
        msg = q.receive()
        assert msg is not None
        assert (msg.group is not None) == (kind == "group"), msg.group
        receive = dict(counts)
        counts.clear()
        msg.delete()
        delete = dict(counts)
    lifecycle = sum(send.values()) + sum(receive.values()) + sum(delete.values())
    return {
        "protocol": protocol,
        "kind": kind,
        "backlog": backlog,
        "send": send,
        "first_receive": first_receive,
        "receive": receive,
        "delete": delete,
        "lifecycle": lifecycle,
    }


def steady_requests(
    root: str, options: dict[str, Any], count: int, kind: str = "plain"
) -> dict[str, float]:
    """Requests per message of sending ``count`` one by one (as ``kind``),
    receiving them in batches of 10 and acking each, until the queue is closed
    (which sends what deletions it held back): everything a message costs,
    listings included. A grouped batch takes one message (one group, one in
    flight)."""
    with vsqs.Queue(fresh_url(root), storage_options=options) as q:
        counts = requests_of(q)
        counts.clear()
        for _ in range(count):
            send_one(q, kind)
        done = 0
        while msgs := q.receive_batch(10):
            for msg in msgs:
                msg.delete()
            done += len(msgs)
        assert done == count
    return {kind: n / count for kind, n in sorted(counts.items())} | {
        "total": sum(counts.values()) / count
    }


def by_kind(root: str, options: dict[str, Any], quick: bool) -> dict[str, dict[str, Any]]:
    """:func:`count_requests` (backlog 10 and a large one) and
    :func:`steady_requests` of every kind in :data:`KINDS`, side by side."""
    large, steady = (200, 100) if quick else (3000, 300)
    return {
        kind: {
            "small": count_requests(root, options, 10, kind),
            "large": count_requests(root, options, large, kind),
            "steady": steady_requests(root, options, steady, kind),
        }
        for kind in KINDS
    }


def print_kinds(name: str, kinds: dict[str, dict[str, Any]]) -> None:
    """The lifecycle of each kind, and how many requests more than a plain one."""
    plain = kinds["plain"]
    backlogs = f"{plain['small']['backlog']} / {plain['large']['backlog']}"
    print(f"{name}: requests per lifecycle (send, receive, delete) by kind of message, "
          f"backlog {backlogs}; steady state")  # fmt: skip
    for kind, f in kinds.items():
        small, large, steady = f["small"], f["large"], f["steady"]
        extra = max(small["lifecycle"] - plain["small"]["lifecycle"],
                    large["lifecycle"] - plain["large"]["lifecycle"])  # fmt: skip
        ops = ", ".join(f"{op} {sum(small[op].values())}" for op in ("send", "receive", "delete"))
        more = steady["total"] - plain["steady"]["total"]
        print(f"  {kind:6} {small['lifecycle']:3} / {large['lifecycle']:3} (+{extra}; {ops}); "
              f"steady {steady['total']:.2f} (+{more:.2f})")  # fmt: skip


def raw_lifecycle(options: dict[str, Any], count: int) -> tuple[float, float]:
    """µs per send and per receive+delete of the same requests with no queue logic."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    prefix = uuid.uuid4().hex[:8]

    def call(method: str, **kwargs: Any) -> Any:
        return fs.call_s3(method, Bucket="bench", **kwargs)

    start = time.perf_counter()
    for i in range(count):
        call("put_object", Key=f"{prefix}/{i:08d}", Body=BODY, IfNoneMatch="*")
    send = (time.perf_counter() - start) / count * 1e6
    start = time.perf_counter()
    for i in range(count):
        key = f"{prefix}/{i:08d}"
        call("put_object", Key=key + ".moved", Body=b"marker", IfNoneMatch="*")  # claim
        call("copy_object", Key=key + ".h", CopySource={"Bucket": "bench", "Key": key})
        call("delete_objects", Delete={"Objects": [{"Key": key}]})
        fs.cat_file(f"bench/{key}.h")  # how vsqs reads a body
        call("put_object", Key=key + ".h.moved", Body=b"", IfNoneMatch="*")  # ack
        call("head_object", Key=key + ".h")
        call(
            "delete_objects",  # the batch that carries the deletions (amortized in vsqs)
            Delete={
                "Objects": [{"Key": k} for k in (key + ".h", key + ".moved", key + ".h.moved")]
            },
        )
    receive = (time.perf_counter() - start) / count * 1e6
    return send, receive


def vsqs_lifecycle(options: dict[str, Any], count: int) -> tuple[float, float]:
    with vsqs.Queue(fresh_url(), storage_options=options) as q:
        start = time.perf_counter()
        for _ in range(count):
            q.send(BODY)
        send = (time.perf_counter() - start) / count * 1e6
        start = time.perf_counter()
        done = 0
        while (msg := q.receive()) is not None:
            msg.delete()
            done += 1
        assert done == count
        receive = (time.perf_counter() - start) / count * 1e6
    return send, receive


def _consume(
    url: str, options: dict[str, Any], batched: bool, go: Any, taken: Any, requests: Any
) -> None:
    with vsqs.Queue(url, storage_options=options) as q:
        requests_of(q).clear()
        go.wait()
        while msgs := q.receive_batch(10):
            if batched:
                q.delete_batch(msgs)
            else:
                for msg in msgs:
                    msg.delete()
            with taken.get_lock():
                taken.value += len(msgs)
        flush(q)
        with requests.get_lock():
            requests.value += sum(requests_of(q).values())


def race(
    url: str, options: dict[str, Any], count: int, processes: int, *, batched: bool
) -> tuple[float, int]:
    """Seconds for ``processes`` consumers to receive and ack the ``count``
    messages of ``url`` (receive_batch(10), then delete_batch if ``batched``,
    else one delete each), and the requests they made."""
    go, taken, requests = ctx.Event(), ctx.Value("i", 0), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_consume, args=(url, options, batched, go, taken, requests))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    time.sleep(3)  # let the interpreters start and open the queue
    start = time.perf_counter()
    go.set()
    for proc in procs:
        proc.join(1800)
    elapsed = time.perf_counter() - start
    assert taken.value == count, f"{taken.value} of {count} taken"
    return elapsed, requests.value


def consumers(options: dict[str, Any], count: int, processes: int) -> tuple[float, float]:
    """µs per message and requests per message of ``processes`` racing consumers."""
    url = fresh_url()
    with vsqs.Queue(url, storage_options=options) as q:
        q.send_batch([BODY] * count, bundle=False)
    elapsed, requests = race(url, options, count, processes, batched=False)
    return elapsed / count * 1e6, requests / count


# ------------------------------------------------------------- bundles
#: Request prices, USD per 1 000 requests, by vsqs's kind of request (issue
#: 32, as of :data:`PRICES_DATE`). S3 Standard, us-east-1: ``PUT``, ``COPY``,
#: ``POST`` (a ``delete`` is one ``DeleteObjects``) and ``LIST`` 0.005;
#: ``GET`` and ``HEAD`` 0.0004; a single ``DELETE`` is free.
S3_PRICES = {
    "put": 0.005, "copy": 0.005, "delete": 0.005, "list": 0.005,
    "get": 0.0004, "head": 0.0004, "delete_one": 0.0,
}  # fmt: skip
#: GCS Standard: class A (insert, copy, list) 0.005, class B (get, metadata)
#: 0.0004; deletes are free, one by one or in a batch request.
GCS_PRICES = S3_PRICES | {"delete": 0.0}
PRICES_DATE = "2026-11-27"
#: SQS Standard: 0.40 USD per million requests.
SQS_PER_MILLION_REQUESTS = 0.40
#: pawn-queue's requests per message (conditional_write: PUT message, PUT
#: lease, GET the lease's listing entry and the body, DELETE both, a LIST per
#: 5 messages), priced as vsqs's on the same store.
PAWN_QUEUE = {"put": 2.0, "get": 2.0, "delete_one": 2.0, "list": 0.2}
#: The runs compared: (send_batch size, receive_batch size), each with and
#: without bundles.
BUNDLE_RUNS = ((100, 100), (10, 10), (100, 10))


def usd_per_million(per_message: dict[str, float], prices: dict[str, float]) -> float:
    """USD per million messages of ``per_message`` requests by kind at ``prices``."""
    return sum(n * prices[kind] for kind, n in per_message.items()) * 1000


def numbered(count: int) -> list[bytes]:
    """``count`` bodies of :data:`BODY`'s length, each its own."""
    return [f"{i:08d}".encode() + BODY[8:] for i in range(count)]


def batch_workload(
    url: str, options: dict[str, Any], count: int, send: int, receive: int, bundle: bool
) -> Counter[str]:
    """The requests of one client that sends ``count`` messages with
    ``send_batch(send, bundle=bundle)``, then ``receive_batch(receive)`` +
    ``delete_batch`` until empty (:func:`send_receive_ack`)."""
    with vsqs.Queue(url, storage_options=options) as q:
        counts = requests_of(q)
        counts.clear()
        send_receive_ack(q, count, send, receive, bundle)
        return Counter(counts)


def send_receive_ack(q: vsqs.Queue, count: int, send: int, receive: int, bundle: bool) -> None:
    """Send ``count`` messages with ``send_batch(send, bundle=bundle)``, then
    ``receive_batch(receive)`` + ``delete_batch`` until empty, and flush the
    held-back deletions; check that every message came once, with its body,
    and was deleted."""
    bodies = numbered(count)
    ids = [
        i for s in range(0, count, send) for i in q.send_batch(bodies[s : s + send], bundle=bundle)
    ]
    got: dict[str, bytes] = {}
    while msgs := q.receive_batch(receive):
        assert len(msgs) <= receive
        got |= {msg.id: msg.body for msg in msgs}
        done = q.delete_batch(msgs)
        assert len(done.deleted) == len(msgs), done
    flush(q)
    assert got == dict(zip(ids, bodies, strict=True))


def at_server(exchanges: list[Any]) -> Counter[str]:
    """The requests a proxy saw, by HTTP method; a listing (S3's
    ``list-type``, GCS's ``…/o?``) as ``LIST``. A ``COPY`` is a ``PUT``."""
    kinds: Counter[str] = Counter()
    for exchange in exchanges:
        path, _, query = exchange.path.partition("?")
        listing = exchange.method == "GET" and ("list-type" in query or path.endswith("/o"))
        kinds["LIST" if listing else exchange.method] += 1
    return kinds


def bundle_costs(
    root: str, options: dict[str, Any], prices: dict[str, float], count: int
) -> list[dict[str, Any]]:
    """:func:`batch_workload` for each of :data:`BUNDLE_RUNS`, with bundles and
    without, counted by vsqs's adapter and by a proxy in front of the server."""
    endpoint = options.get("client_kwargs", {}).get("endpoint_url") or options["endpoint_url"]
    rows = []
    with FaultProxy(endpoint) as proxy:
        through = proxied(Server(root, options), proxy)
        for send, receive in BUNDLE_RUNS:
            for bundle in (True, False):
                proxy.arm(None)
                counts = batch_workload(fresh_url(root), through, count, send, receive, bundle)
                per = {kind: n / count for kind, n in sorted(counts.items())}
                server = at_server(proxy.exchanges)
                rows.append(
                    {
                        "send": send,
                        "receive": receive,
                        "bundle": bundle,
                        "messages": count,
                        "requests": per,
                        "total": sum(per.values()),
                        "usd_per_million": usd_per_million(per, prices),
                        "at_server": {k: n / count for k, n in sorted(server.items())},
                        "at_server_total": proxy.count / count,
                    }
                )
    return rows


def baselines(prices: dict[str, float]) -> dict[str, tuple[float, float]]:
    """(requests, USD) per message of SQS and pawn-queue, USD per million."""
    return {
        "SQS one at a time": (3.0, 3 * SQS_PER_MILLION_REQUESTS),
        "SQS, batches of 10": (0.3, 0.3 * SQS_PER_MILLION_REQUESTS),
        "pawn-queue": (sum(PAWN_QUEUE.values()), usd_per_million(PAWN_QUEUE, prices)),
    }


def bundle_goals(rows: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Issue 32's request and price goals: (goal, figure, bound), figure <= bound."""
    row = {(r["send"], r["receive"], r["bundle"]): r for r in rows}
    big, small = row[100, 100, True], row[100, 10, True]
    return [
        ("send_batch(100) + receive_batch(100) + delete_batch: requests/msg", big["total"], 0.1),
        ("the same: USD per million messages", big["usd_per_million"], 0.30),
        ("receive_batch(10) from bundles of 100: requests/msg", small["total"], 1.0),
    ]


def print_bundles(name: str, rows: list[dict[str, Any]], prices: dict[str, float]) -> None:
    count = rows[0]["messages"]
    print(
        f"{name}: one client, {count} messages, send_batch(S), then receive_batch(R) + "
        "delete_batch until empty; requests per message (vsqs's adapter, and at the server "
        f"through a proxy) and USD per million messages at {PRICES_DATE} prices"
    )
    kinds = ("put", "copy", "delete", "list", "get", "head")
    print(f"  {'S/R':>7} {'bundles':>7} " + " ".join(f"{k:>6}" for k in kinds)
          + f" {'req/msg':>7} {'server':>7} {'USD/M':>7}")  # fmt: skip
    for r in rows:
        cells = " ".join(f"{r['requests'].get(k, 0):6.3f}" for k in kinds)
        sizes, bundled = f"{r['send']:>3}/{r['receive']:<3}", "yes" if r["bundle"] else "no"
        totals = f"{r['total']:7.3f} {r['at_server_total']:7.3f} {r['usd_per_million']:7.2f}"
        print(f"  {sizes} {bundled:>7} {cells} {totals}")
    for design, (requests, usd) in baselines(prices).items():
        print(f"  {design:>15} {'':>42} {requests:7.3f} {'':>7} {usd:7.2f}")


# ------------------------------------------------------------- latency
class Floor:
    """The requests of vsqs's batches with no queue logic: the same kinds, as
    wide (:data:`IN_FLIGHT` at once), through the same s3fs client."""

    def __init__(self, options: dict[str, Any]) -> None:
        import s3fs

        config = options.get("config_kwargs", {}) | {"max_pool_connections": POOL_THREADS}
        self.fs = s3fs.S3FileSystem(**options | {"config_kwargs": config})
        self.prefix = uuid.uuid4().hex[:8]
        self.pool = ThreadPoolExecutor(IN_FLIGHT)

    def call(self, method: str, **kwargs: Any) -> Any:
        return self.fs.call_s3(method, Bucket="bench", **kwargs)

    def wide(self, method: str, keys: list[str], **kwargs: Any) -> None:
        list(self.pool.map(lambda key: self.call(method, Key=key, **kwargs), keys))

    def send(self, start: int, n: int) -> list[str]:
        """send_batch: a marker, n exclusive creates side by side, the marker's removal."""
        keys = [f"{self.prefix}/{i:08d}" for i in range(start, start + n)]
        self.call("put_object", Key=keys[0] + ".sending", Body=b"", IfNoneMatch="*")
        self.wide("put_object", keys, Body=BODY, IfNoneMatch="*")
        self.call("delete_objects", Delete={"Objects": [{"Key": keys[0] + ".sending"}]})
        return keys

    def receive_and_ack(self, keys: list[str]) -> None:
        """receive_batch + delete_batch: a listing, claim markers, copies, one
        delete of the sources, the bodies; ack markers and heads (their objects
        go with the next batch's delete)."""
        self.call("list_objects_v2", Prefix=self.prefix + "/", MaxKeys=1000)
        self.wide("put_object", [k + ".moved" for k in keys], Body=b"h", IfNoneMatch="*")
        list(
            self.pool.map(
                lambda k: self.call(
                    "copy_object", Key=k + ".h", CopySource={"Bucket": "bench", "Key": k}
                ),
                keys,
            )
        )
        self.call("delete_objects", Delete={"Objects": [{"Key": k} for k in keys]})
        self.wide("get_object", [k + ".h" for k in keys])
        self.wide("put_object", [k + ".h.moved" for k in keys], Body=b"", IfNoneMatch="*")
        self.wide("head_object", [k + ".h" for k in keys])


def latency(upstream: dict[str, Any], rtt: float, count: int) -> dict[str, Any]:
    """Wall time, round trips and requests per message at ``rtt`` seconds a request."""
    endpoint = upstream["client_kwargs"]["endpoint_url"]
    figures: dict[str, Any] = {"rtt_ms": rtt * 1000, "messages": count}
    with FaultProxy(endpoint) as proxy:
        options = copy.deepcopy(upstream) | {"skip_instance_cache": True}
        options["client_kwargs"]["endpoint_url"] = proxy.endpoint
        # The bundles row with no delay first: what the client, the proxy and
        # moto cost on this machine, with no round trip to wait for.
        figures["bundles_100_100_at_0"] = timed_bundles(options, count)[0]
        with vsqs.Queue(fresh_url(), storage_options=options) as q:
            proxy.arm("slow", every=True, delay=rtt)
            counts = requests_of(q)
            counts.clear()
            start = time.perf_counter()
            for _ in range(count // 100):
                q.send_batch([BODY] * 100, bundle=False)
            figures["send_batch_100"] = (time.perf_counter() - start, sum(counts.values()))
            counts.clear()
            start = time.perf_counter()
            done = 0
            while got := q.receive_batch(10):
                q.delete_batch(got)
                done += len(got)
            flush(q)
            assert done == count
            figures["receive_10_delete_batch"] = (time.perf_counter() - start, sum(counts.values()))
        figures["bundles_100_100"] = timed_bundles(options, count)
        floor = Floor(options)
        start = time.perf_counter()
        keys = [k for b in range(count // 100) for k in floor.send(b * 100, 100)]
        figures["floor_send_batch_100"] = (time.perf_counter() - start, None)
        start = time.perf_counter()
        for b in range(0, count, 10):
            floor.receive_and_ack(keys[b : b + 10])
        figures["floor_receive_10_ack"] = (time.perf_counter() - start, None)
        for n in (4, 8):
            url = fresh_url()
            with vsqs.Queue(url, storage_options=upstream) as q:
                q.send_batch([BODY] * count, bundle=False)
            figures[f"consumers_{n}"] = race(url, options, count, n, batched=True)
    return figures


def timed_bundles(options: dict[str, Any], count: int) -> tuple[float, int]:
    """Seconds and requests of :func:`send_receive_ack` in bundles, 100 and
    100, on a queue opened before the clock starts."""
    with vsqs.Queue(fresh_url(), storage_options=options) as q:
        counts = requests_of(q)
        counts.clear()
        start = time.perf_counter()
        send_receive_ack(q, count, 100, 100, bundle=True)
        return time.perf_counter() - start, sum(counts.values())


def print_latency(figures: dict[str, Any]) -> None:
    rtt, count = figures["rtt_ms"] / 1000, figures["messages"]
    print(f"S3 ({figures['server']}) at {figures['rtt_ms']:.0f} ms a request, {count} messages:")
    print(f"  {'':28} {'msg/s':>8} {'RTT/msg':>8} {'req/msg':>8} {'vs floor':>9}")
    for key, floor_key in (
        ("send_batch_100", "floor_send_batch_100"),
        ("receive_10_delete_batch", "floor_receive_10_ack"),
        ("consumers_4", None),
        ("consumers_8", None),
        ("bundles_100_100", None),
    ):
        seconds, requests = figures[key]
        ratio = f"{seconds / figures[floor_key][0]:9.2f}" if floor_key else ""
        print(f"  {key:28} {count / seconds:8.0f} {seconds / count / rtt:8.2f} "
              f"{requests / count:8.2f} {ratio}")  # fmt: skip
        if floor_key:
            floor = figures[floor_key][0]
            print(f"  {'  floor':28} {count / floor:8.0f} {floor / count / rtt:8.2f}")
    seconds, idle = figures["bundles_100_100"][0], figures["bundles_100_100_at_0"]
    print(
        f"  bundles: send_batch(100), receive_batch(100) + delete_batch, one client: "
        f"{seconds / count / rtt:.3f} round trips of wall time per message "
        f"(goal <= 0.1); the same at 0 ms takes {idle:.2f} s on this machine (client, proxy, "
        f"server): {(seconds - idle) / count / rtt:.3f} round trips per message beyond it"
    )


def stores(tmp: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(name, root URL, storage options)`` of every store this machine can run."""
    with moto_s3("bench") as options:
        yield "S3 (moto)", "s3://bench", options
    if ceph_available():
        with ceph_rgw("bench") as options:
            yield "S3 (Ceph RGW)", "s3://bench", options
    with fake_gcs("bench", tmp) as options:
        yield "GCS (fake-gcs-server)", "gs://bench", options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--rtt", type=float, metavar="MS", help="only the latency mode, every request held MS ms"
    )
    parser.add_argument(
        "--ceph", action="store_true", help="the latency mode on Ceph RGW instead of moto"
    )
    parser.add_argument(
        "--kinds", action="store_true", help="only the requests per operation, by kind of message"
    )
    parser.add_argument(
        "--bundles", action="store_true", help="only the requests and prices of batches, bundled"
    )
    args = parser.parse_args(argv)
    count = 200 if args.quick else 1000
    if args.bundles:
        return bundles_main(count, args.json)
    if args.rtt is not None:
        server = ceph_rgw if args.ceph else moto_s3
        with server("bench") as options:
            figures = latency(options, args.rtt / 1000, count)
        figures["server"] = "Ceph RGW" if args.ceph else "moto"
        print_latency(figures)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
        return 0
    figures: dict[str, Any] = {"stores": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, root, options in stores(tmp):
            table = by_kind(root, options, args.quick)
            small, large, steady = (table["plain"][k] for k in ("small", "large", "steady"))
            figures["stores"][name] = {"small": small, "large": large, "steady": steady}
            figures["stores"][name]["kinds"] = table
            print(f"{name}, protocol {small['protocol']}: requests per operation (backlog "
                  f"{small['backlog']} / {large['backlog']})")  # fmt: skip
            for op in ("send", "first_receive", "receive", "delete"):
                print(f"  {op:14} {small[op]}  /  {large[op]}")
            print(f"  lifecycle      {small['lifecycle']}  /  {large['lifecycle']}")
            kinds = ", ".join(f"{k} {v:.2f}" for k, v in steady.items() if k != "total")
            print(f"  steady state   {steady['total']:.2f} requests per message ({kinds})")
            print_kinds(name, table)
            if args.kinds:
                continue
            prices = GCS_PRICES if root.startswith("gs:") else S3_PRICES
            rows = figures["stores"][name]["bundles"] = bundle_costs(root, options, prices, count)
            print_bundles(name, rows, prices)
            if name != "S3 (moto)":
                continue
            raw_send, raw_receive = raw_lifecycle(options, count)
            send, receive = vsqs_lifecycle(options, count)
            four, four_requests = consumers(options, count, 4)
            eight, eight_requests = consumers(options, count, 8)
            figures |= {
                "send_us": send,
                "raw_send_us": raw_send,
                "receive_delete_us": receive,
                "raw_receive_delete_us": raw_receive,
                "four_consumers_us": four,
                "four_consumers_requests": four_requests,
                "eight_consumers_us": eight,
                "eight_consumers_requests": eight_requests,
            }
            print(f"  send           {send:8.0f} µs/msg   raw {raw_send:8.0f}   "
                  f"ratio {send / raw_send:.2f}")  # fmt: skip
            print(f"  receive+delete {receive:8.0f} µs/msg   raw {raw_receive:8.0f}   "
                  f"ratio {receive / raw_receive:.2f}")  # fmt: skip
            for n, us, reqs in ((4, four, four_requests), (8, eight, eight_requests)):
                print(f"  {n} consumers    {us:8.0f} µs/msg   ({1e6 / us:.0f} msg/s, "
                      f"{reqs:.1f} requests per received + deleted message)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def bundles_main(count: int, json_path: str | None) -> int:
    """``--bundles``: :func:`bundle_costs` on every store, and issue 32's goals on moto."""
    figures: dict[str, Any] = {"prices_date": PRICES_DATE, "stores": {}}  # by store: rows
    with tempfile.TemporaryDirectory() as tmp:
        for name, root, options in stores(tmp):
            prices = GCS_PRICES if root.startswith("gs:") else S3_PRICES
            rows = figures["stores"][name] = bundle_costs(root, options, prices, count)
            print_bundles(name, rows, prices)
    goals = bundle_goals(figures["stores"]["S3 (moto)"])
    figures["goals"] = [{"goal": g, "figure": f, "target": b, "met": f <= b} for g, f, b in goals]
    for goal, figure, bound in goals:
        print(
            f"{'met   ' if figure <= bound else 'MISSED'} {goal}: {figure:.3f} (goal <= {bound:g})"
        )
    if json_path:
        Path(json_path).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
