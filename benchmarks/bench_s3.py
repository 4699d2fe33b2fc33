"""S3 benchmarks on a moto server: requests per message, and throughput against raw requests.

Starts a moto S3 server on 127.0.0.1 (an OS-chosen port) in a subprocess and
measures, in the same run:

* the requests each operation makes, counted by vsqs's request adapter: send,
  receive (claim + body), delete, and the listings per receive on a small and
  a large backlog (they must not grow with the backlog);
* vsqs's throughput (send; receive + delete with one consumer; four and
  eight consumer processes, with their requests per message) against a raw
  loop of the same requests through the same s3fs client with no queue
  logic (``put_object`` for a send; ``put_object``, ``cat_file``,
  ``copy_object``, ``delete_objects``, ``delete_object`` for a receive +
  delete). moto is slow and single-process, so only the ratios
  mean anything; real S3 is bound by its round-trip time instead.

    python benchmarks/bench_s3.py            # default sizes, about a minute
    python benchmarks/bench_s3.py --quick    # small sizes
    python benchmarks/bench_s3.py --json figures.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import vsqs
from vsqs._store_object import ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._moto_server import moto_s3

BODY = b"x" * 100
ctx = multiprocessing.get_context("spawn")


def fresh_url() -> str:
    return f"s3://bench/{uuid.uuid4().hex[:8]}/q"


def requests_of(q: vsqs.Queue) -> Counter[str]:
    store = q._store
    assert isinstance(store, ObjectStore)
    return store.io.requests


def count_requests(options: dict[str, Any], backlog: int) -> dict[str, Any]:
    """Requests of each operation once the receiver has its candidates."""
    with vsqs.Queue(fresh_url(), storage_options=options) as q:
        q.send_batch([BODY] * backlog)
        counts = requests_of(q)
        counts.clear()
        first = q.receive()
        assert first is not None
        first_receive = dict(counts)
        first.delete()
        counts.clear()
        q.send(BODY)
        send = dict(counts)
        counts.clear()
        msg = q.receive()
        assert msg is not None
        receive = dict(counts)
        counts.clear()
        msg.delete()
        delete = dict(counts)
    lifecycle = sum(send.values()) + sum(receive.values()) + sum(delete.values())
    return {
        "backlog": backlog,
        "send": send,
        "first_receive": first_receive,
        "receive": receive,
        "delete": delete,
        "lifecycle": lifecycle,
    }


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
        call("put_object", Key=key + ".moved", Body=b"marker", IfNoneMatch="*")
        fs.cat_file(f"bench/{key}")  # how vsqs reads a body
        call("copy_object", Key=key + ".h", CopySource={"Bucket": "bench", "Key": key})
        call("delete_objects", Delete={"Objects": [{"Key": key}, {"Key": key + ".moved"}]})
        call("delete_object", Key=key + ".h")
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


def _consume(url: str, options: dict[str, Any], go: Any, taken: Any, requests: Any) -> None:
    with vsqs.Queue(url, storage_options=options) as q:
        requests_of(q).clear()
        go.wait()
        while True:
            msgs = q.receive_batch(10)
            if not msgs:
                break
            for msg in msgs:
                msg.delete()
            with taken.get_lock():
                taken.value += len(msgs)
        with requests.get_lock():
            requests.value += sum(requests_of(q).values())


def consumers(options: dict[str, Any], count: int, processes: int) -> tuple[float, float]:
    """µs per message and requests per message of ``processes`` racing consumers."""
    url = fresh_url()
    with vsqs.Queue(url, storage_options=options) as q:
        q.send_batch([BODY] * count)
    go, taken, requests = ctx.Event(), ctx.Value("i", 0), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_consume, args=(url, options, go, taken, requests))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    time.sleep(3)  # let the interpreters start
    start = time.perf_counter()
    go.set()
    for proc in procs:
        proc.join(600)
    elapsed = time.perf_counter() - start
    assert taken.value == count, f"{taken.value} of {count} taken"
    return elapsed / count * 1e6, requests.value / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    count = 200 if args.quick else 1000
    with moto_s3("bench") as options:  # the test suite's launcher
        small = count_requests(options, 10)
        large = count_requests(options, 200 if args.quick else 3000)
        raw_send, raw_receive = raw_lifecycle(options, count)
        send, receive = vsqs_lifecycle(options, count)
        four, four_requests = consumers(options, count, 4)
        eight, eight_requests = consumers(options, count, 8)
    figures = {
        "requests_small_backlog": small,
        "requests_large_backlog": large,
        "send_us": send,
        "raw_send_us": raw_send,
        "receive_delete_us": receive,
        "raw_receive_delete_us": raw_receive,
        "four_consumers_us": four,
        "four_consumers_requests": four_requests,
        "eight_consumers_us": eight,
        "eight_consumers_requests": eight_requests,
    }
    print(f"requests per operation (backlog {small['backlog']} / {large['backlog']}):")
    for op in ("send", "first_receive", "receive", "delete"):
        print(f"  {op:14} {small[op]}  /  {large[op]}")
    print(f"  lifecycle      {small['lifecycle']}  /  {large['lifecycle']} requests per message")
    print(
        f"send             {send:8.0f} µs/msg   raw {raw_send:8.0f}   ratio {send / raw_send:.2f}"
    )
    print(
        f"receive+delete   {receive:8.0f} µs/msg   raw {raw_receive:8.0f}   "
        f"ratio {receive / raw_receive:.2f}"
    )
    for n, us, reqs in ((4, four, four_requests), (8, eight, eight_requests)):
        print(
            f"{n} consumers      {us:8.0f} µs/msg   ({1e6 / us:.0f} msg/s, "
            f"{reqs:.1f} requests per received + deleted message)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
