"""S3 faults on the wire, at every call site of every operation, through the real client stack.

``tests/test_object_faults.py`` injects faults above the HTTP client. Here the
crashing client of each scenario of ``tests/test_crashes.py`` is a real
s3fs -> aiobotocore -> aiohttp stack pointed at :class:`~tests.support.fault_proxy.FaultProxy`,
a forwarding proxy in front of the moto server; its healthy peer and the
recovery talk to moto directly. Per run the proxy answers the k-th request
with a 500 ``InternalError``, a 503 ``SlowDown``, a TCP reset, a reset *after*
forwarding (the request takes effect, its response is lost), ``SlowDown`` or
resets from then on (throttling, a dead network), or slow responses. The
library's own retries do what they do in production; the tests check that

* the operation completes, or raises a :class:`vsqs.VsqsError` (never a raw
  botocore, aiohttp or s3fs exception), and when storage keeps failing the
  error says so (``StorageError``, not "no such queue");
* one 500, 503 or reset is retried (the proxy sees the call sent again) and
  the operation completes, except an exclusive create: the adapter never lets
  botocore or s3fs send one twice (a late second create could bring back a
  consumed message), and vsqs resolves its unknown outcome itself
  (docs/protocol.md): it reads the name back, then publishes under a fresh
  name or creates the marker again;
* a fresh client then recovers and the checks of ``test_crashes`` hold: nothing
  lost, no two live names of one message, no partial message, nothing
  acknowledged coming back;
* slow claims never let two clients hold one message.

Which k: a dry run of each scenario lists its requests (about 95); a *call
site* is a kind of request (method, kind of key, queue, condition header). A
lost response and the faults that never reach the store (500, reset,
throttling, a dead network) hit the first request of each call site across
all scenarios (about 22); a 503, on botocore's path of a 500, the first
request of each scenario. What is left out repeats a call site (the second
message of a batch, the claim inside ``receive_and_delete``, the same
request in another scenario): what the client stack does with a fault is a
matter of the request, and what vsqs does with a lost response in each state
an operation builds is swept at every request of every scenario in this
process (``tests/test_object_faults.py``). Moves left unfinished are finished by the first
lister (``FINISH_AFTER = -1``), harsher than the default delay.

Retry knobs of the client under test, library defaults in brackets: botocore
``retries={"mode": "standard", "total_max_attempts": 2}`` [legacy mode, 5
attempts, backoff ``rand(0, 1) * 2**n`` s]; s3fs ``retries = 1``, an instance
attribute and not a storage option [5 attempts of each botocore call on
``SlowDown``, timeouts and dropped connections, backoff ``0.1 * 1.7**n`` s: a
throttled send gives up after 25 requests and ~45 s]. aiohttp re-sends an
idempotent request (PUT, GET, HEAD, DELETE) once, at once, when a reused
connection dies; botocore counts both as one attempt. Runs go in parallel on
a few proxies.

Three tests pin bugs they found (now fixed): a bucket check that failed for
any reason was reported as ``QueueNotFound``; a connection error that
outlasted the retries escaped as a raw botocore exception; a claim slower
than its visibility timeout was still delivered.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest

import vsqs
from vsqs import _names as names
from vsqs._config import ENV_BUNDLES
from vsqs.stores import _moves
from vsqs.stores._object import ObjectStore
from vsqs.stores._registry import open_store
from vsqs.testing import FakeClock

from .support.crashes import BODY, SCENARIOS, Expect, open_pair, recover_and_check
from .support.fault_proxy import Exchange, FaultProxy
from .support.servers import Server

#: One worker runs the module: the proxies and the dry runs are set up once.
pytestmark = pytest.mark.xdist_group("s3-faults")

#: botocore attempts per call (the first one included); s3fs attempts of each call.
ATTEMPTS = 2
S3FS_RETRIES = 1
#: Runs in flight at once, each on its own proxy and client.
WORKERS = 6
DEFAULT_FINISH_AFTER = _moves.FINISH_AFTER


def client_options(server: Server, endpoint: str) -> dict[str, Any]:
    """Storage options of a client that reaches ``server`` through ``endpoint``."""
    options = copy.deepcopy(server.storage_options)
    options["client_kwargs"]["endpoint_url"] = endpoint
    options["config_kwargs"] = {"retries": {"mode": "standard", "total_max_attempts": ATTEMPTS}}
    return options


def open_through(server: Server, url: str, proxy: FaultProxy) -> ObjectStore:
    """The queue ``url`` of ``server``, reached through ``proxy`` with the test's retry knobs."""
    store = open_store(url, client_options(server, proxy.endpoint))
    assert isinstance(store, ObjectStore)
    store.io.fs.retries = S3FS_RETRIES  # type: ignore[attr-defined]
    return store


def call_site(exchange: Exchange) -> tuple[str, str, str, str]:
    """What a request does: method, kind of key, queue, condition header."""
    path, _, query = exchange.path.partition("?")
    condition = exchange.condition.partition(":")[0]
    params = parse_qs(query)
    if "list-type" in params:
        return exchange.method, "list", params["prefix"][0].rstrip("/").rpartition("/")[2], ""
    if "delete" in params or query == "delete":
        return exchange.method, "delete-objects", "", condition
    parts = path.strip("/").split("/")
    if len(parts) == 1:
        return exchange.method, "bucket", "", condition
    key = unquote(parts[-1])
    marker = key.endswith(_moves.MOVED_SUFFIX)
    parsed = names.parse(key.removesuffix(_moves.MOVED_SUFFIX))
    kind = "config" if parsed is None else str(parsed.state) + (" marker" if marker else "")
    return exchange.method, kind, parts[-2], condition


@dataclass
class Run:
    """One run of a scenario with a fault, and what came of it."""

    scenario: str
    fault: str | None
    at: int
    #: What the operation raised (``None``: it completed).
    error: BaseException | None
    #: The traceback of an error that is not a ``VsqsError``.
    escaped: str | None
    #: Why the recovery check failed, if it did.
    broken: str | None
    #: Everything the proxy saw from the arming on, and how many requests it counted.
    exchanges: list[Exchange]
    count: int

    def __str__(self) -> str:
        return f"{self.scenario}, {self.fault} at request {self.at}"

    def faulted(self) -> Exchange:
        """The first request the fault hit."""
        hit = next((e for e in self.exchanges if e.fault is not None), None)
        assert hit is not None, f"{self}: the fault hit no request ({self.count} counted)"
        return hit

    def sends_of(self, exchange: Exchange) -> list[Exchange]:
        """Every sending of the call ``exchange`` belongs to (botocore's and aiohttp's)."""
        return [e for e in self.exchanges if e.invocation == exchange.invocation]


class Rig:
    """Scenario runs on ``WORKERS`` proxies in front of one moto server."""

    def __init__(self, server: Server, proxies: list[FaultProxy]) -> None:
        self.server = server
        self._free: queue.Queue[FaultProxy] = queue.Queue()
        for proxy in proxies:
            self._free.put(proxy)

    def run(self, scenario: str, fault: str | None, at: int = 1, **plan: Any) -> Run:
        """Run ``scenario``, ``fault`` at request ``at`` of the crashing client; recover.

        A run in which moto itself answered a server error (moto's handlers are
        not thread-safe: under load, concurrent runs meet its races) is run
        again, up to twice: what is under test is the fault the proxy injects.
        """
        for _ in range(2):
            run = self._run_once(scenario, fault, at, **plan)
            if not any(e.fault is None and (e.status or 0) >= 500 for e in run.exchanges):
                break
        return run

    def _run_once(self, scenario: str, fault: str | None, at: int, **plan: Any) -> Run:
        url = self.server.url()
        store = open_store(url, self.server.storage_options)
        clock = FakeClock(time.time())
        proxy = self._free.get()
        try:
            healthy, crashing = open_pair(store, open_through(self.server, url, proxy), clock, True)
            proxy.arm(fault, at, **plan)
            expect = Expect()
            error: BaseException | None = None
            escaped = None
            try:
                SCENARIOS[scenario](healthy, crashing, expect)
            except vsqs.VsqsError as exc:
                error = exc
            except Exception as exc:
                error, escaped = exc, "".join(traceback.format_exception(exc))
            proxy.disarm()
            exchanges, count = list(proxy.exchanges), proxy.count
        finally:
            self._free.put(proxy)
        broken = None
        try:
            recover_and_check(store, clock, expect)
        except Exception as exc:
            broken = "".join(traceback.format_exception(exc))
        return Run(scenario, fault, at, error, escaped, broken, exchanges, count)

    def runs(self, jobs: Iterable[tuple[str, int]], fault: str | None, **plan: Any) -> list[Run]:
        """Run each ``(scenario, k)`` with ``fault`` at request k, in parallel."""
        with ThreadPoolExecutor(WORKERS) as pool:
            return list(pool.map(lambda job: self.run(job[0], fault, job[1], **plan), jobs))


def check(runs: list[Run]) -> None:
    """Every run completed or raised a VsqsError, and recovery found the queue consistent."""
    assert runs
    problems = [f"{run}: a raw exception escaped:\n{run.escaped}" for run in runs if run.escaped]
    problems += [f"{run}: recovery check failed:\n{run.broken}" for run in runs if run.broken]
    assert not problems, f"{len(problems)} of {len(runs)} runs failed:\n\n" + "\n\n".join(
        problems[:3]
    )


@pytest.fixture(scope="module", autouse=True)
def _messages_alone() -> Iterator[None]:
    """Batches here are one object per message: these faults are those of
    the batch protocol of messages alone (batch markers, creates side by
    side); a bundle is one create (its faults: tests/test_splits.py and the
    simulation's bundle plans)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV_BUNDLES, "0")
        yield


@pytest.fixture(scope="module", autouse=True)
def finish_at_once() -> Iterator[None]:
    """Moves left unfinished are finished by the first lister (harsher than the default)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_moves, "FINISH_AFTER", -1.0)
        yield


@pytest.fixture(scope="module")
def rig(s3_server: Server) -> Iterator[Rig]:
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    with ExitStack() as stack:
        yield Rig(s3_server, [stack.enter_context(FaultProxy(endpoint)) for _ in range(WORKERS)])


@pytest.fixture(scope="module")
def dry_runs(rig: Rig) -> dict[str, Run]:
    """Each scenario without a fault: its requests through the proxy."""
    runs = rig.runs(((scenario, 1) for scenario in SCENARIOS), None)
    check(runs)
    for run in runs:
        assert run.error is None, f"{run}: {run.error!r}"
        assert run.count >= 1 and len(run.exchanges) == run.count
    return {run.scenario: run for run in runs}


def call_sites(
    dry_runs: dict[str, Run],
    *,
    per_scenario: bool,
    where: Callable[[tuple[str, str, str, str]], bool] | None = None,
) -> list[tuple[str, int]]:
    """``(scenario, k)`` of the first request of each call site, per scenario or overall,
    of the call sites ``where(site)`` accepts."""
    jobs: list[tuple[str, int]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for scenario, run in dry_runs.items():
        if per_scenario:
            seen = set()
        for exchange in run.exchanges:
            site = call_site(exchange)
            if site not in seen and (where is None or where(site)):
                seen.add(site)
                jobs.append((scenario, exchange.number))
    return jobs


def test_every_scenario_has_a_request_at_each_call_site(dry_runs: dict[str, Run]) -> None:
    """The sweep covers claims, copies, batch deletes, acks, sends and the bucket check."""
    sites = {call_site(e) for run in dry_runs.values() for e in run.exchanges}
    kinds = {(method, kind, condition) for method, kind, _, condition in sites}
    for expected in [
        ("PUT", "ready", "If-None-Match"),  # send
        ("PUT", "ready marker", "If-None-Match"),  # claim
        ("PUT", "invisible marker", "If-None-Match"),  # extend, release
        ("PUT", "invisible", ""),  # the copy
        ("POST", "delete-objects", ""),
        ("HEAD", "invisible", ""),  # ack, after its marker
        ("GET", "list", ""),
        ("HEAD", "bucket", ""),
    ]:
        assert expected in kinds, f"no {expected} among {sorted(kinds)}"
    assert len(call_sites(dry_runs, per_scenario=False)) >= 20


@pytest.mark.sweep
@pytest.mark.parametrize("fault", ["500", "503", "reset"])
def test_one_server_error_or_reset_at_any_call_site_is_retried_and_the_operation_completes(
    rig: Rig, dry_runs: dict[str, Run], fault: str
) -> None:
    """A 503 SlowDown takes botocore's path of a 500 (it is also classed as throttling,
    which changes only the backoff): it is injected at the first request of each
    operation only."""
    if fault == "503":
        jobs = [(scenario, 1) for scenario in dry_runs]
    else:
        jobs = call_sites(dry_runs, per_scenario=False)
    runs = rig.runs(jobs, fault)
    check(runs)
    for run in runs:
        hit = run.faulted()
        sends = run.sends_of(hit)
        if is_create(hit):
            assert len(sends) == 1, f"{run}: botocore or s3fs sent a create again: {sends}"
        else:
            assert len(sends) >= 2 and sends[-1].status is not None, f"{run}: not sent again"
        assert run.error is None, f"{run}: one retried fault failed the operation: {run.error!r}"


def is_create(exchange: Exchange) -> bool:
    return exchange.method == "PUT" and exchange.condition == "If-None-Match: *"


@pytest.mark.sweep
def test_a_lost_response_at_any_call_site_is_resolved_and_loses_nothing(
    rig: Rig, dry_runs: dict[str, Run]
) -> None:
    runs = rig.runs(call_sites(dry_runs, per_scenario=False), "lost")
    check(runs)
    creates = 0
    for run in runs:
        hit = run.faulted()
        sends = run.sends_of(hit)
        assert hit.forwarded, f"{run}: the lost call did not reach the server"
        assert run.error is None, f"{run}: a call whose response was lost failed: {run.error!r}"
        if is_create(hit):
            # Never sent again by the client library: vsqs reads back what it wrote.
            creates += 1
            assert len(sends) == 1, f"{run}: the create was sent again: {sends}"
            key = hit.path.partition("?")[0]
            later = [
                (e.method, e.path.partition("?")[0]) for e in run.exchanges if e.number > hit.number
            ]
            assert ("GET", key) in later, f"{run}: the create's outcome was not read back"
        else:
            assert len(sends) >= 2, f"{run}: the lost call was not sent again"
    assert creates >= 5, "the sweep hit too few exclusive creates to mean anything"


def _not_the_bucket_check(site: tuple[str, str, str, str]) -> bool:
    return site[1] != "bucket"


def test_throttling_that_outlasts_the_retries_ends_in_a_storage_error(
    rig: Rig, dry_runs: dict[str, Run]
) -> None:
    runs = rig.runs(
        call_sites(dry_runs, per_scenario=False, where=_not_the_bucket_check), "throttle"
    )
    check(runs)
    for run in runs:
        hit = run.faulted()
        statuses = [e.status for e in run.sends_of(hit)]
        sent = 1 if is_create(hit) else ATTEMPTS
        assert statuses == [503] * sent, f"{run}: the throttled call was sent {statuses}"
        if run.error is not None:
            assert isinstance(run.error, vsqs.StorageError), f"{run}: {run.error!r}"
    failed = sum(run.error is not None for run in runs)
    assert failed >= len(runs) * 3 // 4, f"only {failed} of {len(runs)} throttled runs failed"


def test_throttling_of_the_bucket_check_is_a_storage_error_not_a_missing_queue(
    rig: Rig, dry_runs: dict[str, Run]
) -> None:
    jobs = call_sites(dry_runs, per_scenario=True, where=lambda site: site[1] == "bucket")
    assert jobs
    runs = rig.runs(jobs, "throttle")
    check(runs)
    for run in runs:
        assert isinstance(run.error, vsqs.StorageError), f"{run}: {run.error!r}"


@pytest.mark.sweep
def test_a_dead_connection_at_any_call_site_ends_in_a_storage_error(
    rig: Rig, dry_runs: dict[str, Run]
) -> None:
    runs = rig.runs(call_sites(dry_runs, per_scenario=False), "reset", every=True)
    check(runs)
    for run in runs:
        assert all(e.status is None for e in run.sends_of(run.faulted()))
        if run.error is not None:
            assert isinstance(run.error, vsqs.StorageError), f"{run}: {run.error!r}"
    failed = sum(run.error is not None for run in runs)
    assert failed >= len(runs) * 3 // 4, f"only {failed} of {len(runs)} runs failed"


SLOW_SCENARIOS = ["send_batch", "receive_and_delete", "extend", "redrive"]


def test_operations_complete_when_every_response_is_slow(rig: Rig) -> None:
    runs = rig.runs(((s, 1) for s in SLOW_SCENARIOS), "slow", every=True, delay=0.1)
    check(runs)
    for run in runs:
        assert run.error is None, f"{run}: {run.error!r}"
        assert all(e.fault == "slow" for e in run.exchanges) and run.count >= 3
        invocations = [e.invocation for e in run.exchanges]
        assert len(set(invocations)) == len(invocations), f"{run}: a slow call was sent again"


@dataclass(frozen=True)
class Hold:
    """One claim: monotonic ns before the receive and after it returned, the receipt."""

    client: str
    asked: int
    got: int
    got_wall_ns: int
    receipt: str
    count: int


def slow_claims(proxy: FaultProxy, delay: float) -> None:
    """Answer every claim marker PUT (``<name>.moved``) ``delay`` seconds late."""
    proxy.arm(
        "slow",
        1,
        every=True,
        delay=delay,
        where=lambda method, path: method == "PUT" and path.endswith(_moves.MOVED_SUFFIX),
    )


@pytest.mark.parametrize("finish_after", ["at once", "default"])
def test_a_client_with_slow_claims_never_holds_a_message_together_with_another(
    s3_server: Server, finish_after: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two direct clients and one whose claim marker PUTs are answered 0.3 s late
    race for 3 messages with a visibility timeout of 0.4 s (more on a slow
    machine) for 7.5 timeouts, without acks (the slow one receives first,
    alone). The surely-held intervals ``[got, asked + vt]`` of one message
    never overlap, every claim has a receive count of its own, and a re-claim
    comes after the expiry written in the previous receipt."""
    if finish_after == "default":
        monkeypatch.setattr(_moves, "FINISH_AFTER", DEFAULT_FINISH_AFTER)
    vt = run_for = 0.0  # set once the machine's speed is known, below
    url = s3_server.url()
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    holds: list[Hold] = []
    lock = threading.Lock()

    def receive(name: str) -> bool:
        asked = time.monotonic_ns()
        msg = queues[name].receive(visibility_timeout=vt)
        if msg is None:
            return False
        got, wall = time.monotonic_ns(), time.time_ns()
        assert msg.receipt is not None and msg.body == BODY
        with lock:
            holds.append(Hold(name, asked, got, wall, msg.receipt, msg.receive_count))
        return True

    def consume(name: str) -> None:
        while time.monotonic() < deadline:
            if not receive(name):
                time.sleep(0.01)

    with FaultProxy(endpoint) as proxy:
        queues = {
            name: vsqs.Queue(url, storage_options=s3_server.storage_options)
            for name in ("fast-1", "fast-2")
        }
        ids = set(queues["fast-1"].send_batch([BODY] * 3))
        queues["slow"] = vsqs.Queue(open_through(s3_server, url, proxy))
        # A claim that outlasts its timeout is rightly not delivered: the
        # timeout leaves the slow claims 0.1 s, or four undelayed receives of
        # this machine, on top of their 0.3 s delay.
        started = time.monotonic()
        probe = queues["slow"].receive(visibility_timeout=60)
        assert probe is not None
        probe.release()
        vt = 0.3 + max(0.1, 4 * (time.monotonic() - started))
        run_for = 7.5 * vt
        slow_claims(proxy, 0.3)
        assert receive("slow"), "the slow client, alone, received nothing"
        deadline = time.monotonic() + run_for
        with ThreadPoolExecutor(len(queues)) as pool:
            for future in [pool.submit(consume, name) for name in queues]:
                future.result()
        for queue_ in queues.values():
            queue_.close()
    by_id: dict[str, list[Hold]] = defaultdict(list)
    for hold in holds:
        parsed = names.parse(hold.receipt)
        assert parsed is not None and parsed.id in ids
        by_id[parsed.id].append(hold)
    vt_ns = int(vt * 1e9)
    handoffs = 0
    for message_id, claims in by_id.items():
        counts = [h.count for h in claims]
        assert len(set(counts)) == len(counts), f"{message_id}: two claims with one count {counts}"
        held_until, holder = -1, ""
        for hold in sorted(claims, key=lambda h: h.got):
            assert hold.got >= held_until, (
                f"{message_id} held by {holder} and {hold.client} at once "
                f"({(held_until - hold.got) / 1e6:.1f} ms)"
            )
            if hold.asked + vt_ns > held_until:
                held_until, holder = hold.asked + vt_ns, hold.client
        ordered = sorted(claims, key=lambda h: h.count)
        for prev, nxt in itertools.pairwise(ordered):
            expiry_ms = names.parse(prev.receipt).expiry_ms  # type: ignore[union-attr]
            assert expiry_ms is not None
            assert nxt.got_wall_ns + 1_000_000 >= expiry_ms * 1_000_000, (
                f"{message_id} re-claimed by {nxt.client} before the expiry of {prev.receipt}"
            )
            handoffs += prev.client == "slow" and nxt.client != "slow"
    assert handoffs, "no message passed from the slow client to another: the race did not happen"


def test_a_claim_that_outlasts_its_visibility_timeout_is_not_delivered(s3_server: Server) -> None:
    """A claim whose marker PUT is answered 0.5 s late, with a 0.2 s visibility timeout:
    by the time it could return, the message is visible to everyone again."""
    url = s3_server.url()
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    with (
        FaultProxy(endpoint) as proxy,
        vsqs.Queue(url, storage_options=s3_server.storage_options) as fast,
        vsqs.Queue(open_through(s3_server, url, proxy)) as slow,
    ):
        fast.send(BODY)
        slow_claims(proxy, 0.5)
        late = slow.receive(visibility_timeout=0.2)
        other = fast.receive(visibility_timeout=30)
        assert other is not None, "the message was not visible again after the timeout"
        assert late is None, f"{late.id} was delivered to two clients at once"


def test_a_batch_whose_every_create_fails_names_the_stores_error(s3_server: Server) -> None:
    """Every create answered 500, past the SDK's retries: each fresh name of
    the batch's marker is burned, and the error says why. Before: only 'could
    not mark a batch under 8 fresh ids'."""
    url = s3_server.url()
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    with FaultProxy(endpoint) as proxy, vsqs.Queue(open_through(s3_server, url, proxy)) as q:
        proxy.arm("500", every=True, where=lambda method, path: method == "PUT")
        with pytest.raises(
            vsqs.StorageError, match="could not mark a batch under 8 fresh ids; the last create"
        ) as info:
            q.send_batch([BODY, BODY])
        assert "(500)" in str(info.value)
        proxy.arm(None)
        assert q.stats().ready == 0
