"""A deterministic scheduler for simulated clients of one simulated bucket.

Each client (an *actor*) is a thread running real vsqs code, but only one
thread runs at a time: an actor runs until it sends a request, then parks. The
scheduler then picks, with a seeded random generator, what happens next among
everything that could: a request takes effect; a response is delivered, lost
(the effect happened, the client sees a connection error) or late; a request
fails with 503 without effect (or, with ``Faults.read_error`` and
``record_error``, a GET of a message body or a DELETE of an origin record
fails with a 500 the client does not retry); a client times out while its request is still
on the wire (it may land later, or never); a client process dies; time jumps;
a client host's wall clock steps (an NTP step, a resumed VM), which its
steady clock (``Scheduler.steady``, the bucket's time) never does.
One seed is one schedule: a failure replays exactly (FoundationDB's
deterministic simulation, in the small).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .bucket import Bucket

#: Real seconds the scheduler waits for a running actor to park before it
#: reports a deadlock (an actor blocked on a lock held by a parked one).
WATCHDOG = 60.0


class Crash(BaseException):
    """The death of a simulated client process (a ``BaseException``: nothing may catch it)."""


class Lost(ConnectionResetError):
    """The request took effect; its response was lost."""


class TimedOut(TimeoutError):
    """The client gave up waiting; the request may still take effect later."""


class Throttled(OSError):
    """HTTP 503 SlowDown: the request was refused without effect."""


class Failed(OSError):
    """HTTP 500 after the client library's own retries (or 403): the request
    failed without effect, and the client does not send it again."""


@dataclass(eq=False)
class Request:
    number: int
    actor: Actor | None  # None: an orphan, whose client gave up or died
    what: str
    effect: Callable[[], Any]
    applied: bool = False
    outcome: tuple[bool, Any] | None = None  # (ok, value or exception)
    #: May the request take effect now? (``join`` waits for another actor's end.)
    ready: Callable[[], bool] = lambda: True
    #: What a fault of its own may fail: "read" (a GET of a message body,
    #: ``Faults.read_error``), "record" (a DELETE of an origin record,
    #: ``Faults.record_error``), or "" (none).
    fails: str = ""
    #: The actor that sent it (an orphan's too: ``Bucket.issued``).
    issuer: str = ""


@dataclass(eq=False)
class Actor:
    name: str
    body: Callable[[], None]
    skew: float = 0.0
    #: Actors of one process (threads of one client) die together.
    process: str = ""
    thread: threading.Thread | None = None
    state: str = "new"  # new, running, waiting, done
    crashed: bool = False
    waiting: Request | None = None
    delivered: tuple[bool, Any] | None = None
    error: BaseException | None = None


@dataclass
class Faults:
    """Probabilities (per request) of each fault; 0 everywhere is a fault-free run."""

    slow: float = 0.15  # the effect waits while other requests run
    stall: float = 0.01  # the effect waits until the clock moved on by seconds
    pause: float = 0.01  # the request is held back while many other events happen
    late_response: float = 0.1  # applied now, answered later
    lost: float = 0.02
    throttled: float = 0.02
    timeout: float = 0.01
    crash: float = 0.004
    jump: float = 0.02  # a time jump, per step
    #: A host's wall clock steps to another offset, per step (0: clocks never
    #: step); it is then off the bucket's by its skew plus -``step_by``, 0 or
    #: ``step_by`` (a step of up to twice ``step_by``).
    step: float = 0.0
    step_by: float = 12.0
    #: A GET of a message body fails without effect (``Failed``: a 500 after
    #: the client library's retries, or a 403), so one read of a batch fails
    #: while the others succeed. 0 keeps the schedules of seeds without it.
    read_error: float = 0.0
    #: A DELETE (or batched delete) of origin records fails without effect, as
    #: ``read_error`` (0 keeps the schedules of seeds without it).
    record_error: float = 0.0


@dataclass
class Scheduler:
    seed: int
    bucket: Bucket
    faults: Faults = field(default_factory=Faults)
    start: float = 1_800_000_000.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.bucket.now = self.start
        self._cv = threading.Condition()
        self._requests: list[Request] = []  # not yet answered (or orphans not yet applied)
        self._actors: list[Actor] = []
        self._running: Actor | None = None
        self._current: threading.local = threading.local()
        self._numbers = 0
        self.direct = True  # outside run(): requests take effect at once, in order
        self.trace: list[str] = []
        self.steps = 0
        #: Seconds each process's wall clock was stepped by (to its skew).
        self.stepped: dict[str, float] = {}
        #: How far each actor's wall clock was off the bucket's when it last
        #: measured its offset to the bucket's clock (``SimObjects.store_date``).
        self.measured: dict[str, float] = {}
        #: The faults vsqs saw, by actor: (actor, the bucket's time, kind), kind
        #: "crash", "clock_step" (of its process), "read_error", "record_error"
        #: or the name of the error a request raised after its client's
        #: retries (``SimObjects``).
        self.faulted: list[tuple[str, float, str]] = []

    # ------------------------------------------------------------ clocks
    @property
    def now(self) -> float:
        return self.bucket.now

    def clock(self, skew: float = 0.0) -> Callable[[], float]:
        """A client's wall clock: the bucket's, ``skew`` seconds off, and off by
        as much again as its process's clock was stepped."""
        bucket, stepped = self.bucket, self.stepped
        actor = self.current()
        process = actor.process if actor is not None else ""
        return lambda: bucket.now + skew + stepped.get(process, 0.0)

    def steady(self) -> Callable[[], float]:
        """Every client's steady clock (``time.monotonic``): the bucket's time."""
        bucket = self.bucket
        return lambda: bucket.now

    def offset(self, actor: Actor) -> float:
        """How far ``actor``'s wall clock is off the bucket's now."""
        return actor.skew + self.stepped.get(actor.process, 0.0)

    def measured_offset(self, actor: Actor) -> float:
        """How far ``actor``'s wall clock was off when it last measured the
        bucket's clock (its skew, before its first measure)."""
        return self.measured.get(actor.name, actor.skew)

    # ------------------------------------------------------------ actors
    def actor(
        self, name: str, body: Callable[[], None], skew: float = 0.0, process: str = ""
    ) -> Actor:
        """Add a client thread (of ``process``, by default its own); it starts at a
        point the schedule picks (also while the schedule runs)."""
        actor = Actor(name, body, skew, process or name)
        with self._cv:
            self._actors.append(actor)
        return actor

    def current(self) -> Actor | None:
        return getattr(self._current, "actor", None)

    def join(self, other: Actor) -> None:
        """Park the calling actor until ``other`` has ended."""
        self.call(f"join {other.name}", lambda: None, ready=lambda: other.state == "done")

    def sleep(self, seconds: float) -> None:
        """Park the calling actor until the bucket's clock moved on by ``seconds``."""
        until = self.bucket.now + seconds
        self.call(f"sleep {seconds}", lambda: None, ready=lambda: self.bucket.now >= until)

    def call(
        self,
        what: str,
        effect: Callable[[], Any],
        *,
        ready: Callable[[], bool] | None = None,
        fails: str = "",
    ) -> Any:
        """Send one request from the calling actor and wait for its response
        (``fails``: the fault of its own it may meet, ``Request.fails``)."""
        actor = self.current()
        if self.direct or actor is None:
            self._note(f"direct {what}")
            return effect()
        if actor.crashed:
            raise Crash(f"{actor.name} is dead")
        with self._cv:
            self._numbers += 1
            request = Request(self._numbers, actor, what, effect, fails=fails, issuer=actor.name)
            if ready is not None:
                request.ready = ready
            elif self.rng.random() < self.faults.stall:  # a request that takes its time
                not_before = self.bucket.now + self.rng.choice([0.5, 2.0, 6.0, 15.0])
                request.ready = lambda: self.bucket.now >= not_before
                self._note(f"stall {request.number} until {not_before:.3f}")
            elif self.rng.random() < self.faults.pause:  # its client is paused here
                resume = self.steps + self.rng.randint(5, 200)
                request.ready = lambda: self.steps >= resume
                self._note(f"pause {request.number} until step {resume}")
            self._requests.append(request)
            actor.waiting, actor.delivered, actor.state = request, None, "waiting"
            self._running = None
            self._cv.notify_all()
            while actor.delivered is None:
                self._cv.wait()
            ok, value = actor.delivered
            actor.state, actor.waiting = "running", None
        if ok:
            return value
        raise value

    def _run_actor(self, actor: Actor) -> None:
        self._current.actor = actor
        try:
            if actor.crashed:
                raise Crash(f"{actor.name}'s process died before it started")
            actor.body()
        except Crash:
            pass
        except BaseException as exc:  # reported by the oracle
            actor.error = exc
        finally:
            with self._cv:
                actor.state = "done"
                self._running = None
                self._cv.notify_all()

    # ------------------------------------------------------------ the loop
    def run(self, max_steps: int = 200_000) -> None:
        """Run every actor to its end (dead or done), then settle every orphan."""
        self.direct = False
        try:
            while self._step():
                self.steps += 1
                if self.steps > max_steps:
                    raise RuntimeError(f"seed {self.seed}: no end after {max_steps} steps")
        finally:
            self.direct = True

    def _wait_parked(self) -> None:
        deadline = time.monotonic() + WATCHDOG
        while self._running is not None:
            if not self._cv.wait(timeout=max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"seed {self.seed}: {self._running.name} never parked")

    def _note(self, event: str) -> None:
        self.trace.append(f"{self.bucket.now:.3f} {event}")

    def _step(self) -> bool:
        with self._cv:
            self._wait_parked()
            choices = self._choices()
            if not choices:
                return False
            weights = [w for w, _ in choices]
            _, action = self.rng.choices(choices, weights)[0]
            self.bucket.now += self.rng.uniform(0, 0.004)
            action()
            self._wait_parked()
        return True

    def _choices(self) -> list[tuple[float, Callable[[], None]]]:
        f, out = self.faults, []
        for actor in self._actors:
            if actor.state == "new":
                out.append((1.0, lambda a=actor: self._start(a)))
        for request in self._requests:
            actor = request.actor
            if actor is None:  # an orphan lands late, or never
                out.append((0.5, lambda r=request: self._apply_orphan(r)))
                out.append((0.2, lambda r=request: self._drop(r)))
                continue
            if not request.ready():
                continue
            if request.what.startswith(("join ", "sleep ")):  # no request: it only waits
                out.append((1.0, lambda r=request: self._apply(r, respond=True)))
                continue
            if not request.applied:
                out.append((1.0 - f.slow, lambda r=request: self._apply(r, respond=True)))
                out.append((f.slow, lambda r=request: self._apply(r, respond=False)))
                out.append((f.throttled, lambda r=request: self._refuse(r)))
                out.append((f.timeout, lambda r=request: self._time_out(r)))
                rate = {"read": f.read_error, "record": f.record_error}.get(request.fails, 0.0)
                if rate:
                    out.append((rate, lambda r=request: self._fail(r)))
            else:
                out.append((1.0 - f.late_response, lambda r=request: self._respond(r)))
                out.append((f.lost, lambda r=request: self._lose(r)))
            out.append((f.crash, lambda r=request: self._crash(r)))
        if out:
            out.append((f.jump, self._jump))
            if f.step:
                out.append((f.step, self._step_clock))
        elif self._requests or any(a.state == "waiting" for a in self._actors):
            out.append((1.0, self._jump))  # everything waits for the clock (or for steps)
        return out

    def _start(self, actor: Actor) -> None:
        self._note(f"start {actor.name}")
        actor.state = "running"
        self._running = actor
        actor.thread = threading.Thread(
            target=self._run_actor, args=(actor,), name=f"sim-{actor.name}", daemon=True
        )
        actor.thread.start()

    def _effect(self, request: Request) -> None:
        self.bucket.writer = request.actor.name if request.actor is not None else ""
        self.bucket.issuer = request.issuer
        try:
            request.outcome = (True, request.effect())
        except Exception as exc:
            request.outcome = (False, exc)
        finally:
            self.bucket.writer = self.bucket.issuer = ""
        request.applied = True

    def _apply(self, request: Request, *, respond: bool) -> None:
        self._note(f"apply {request.number} {request.what} {'+respond' if respond else ''}")
        self._effect(request)
        if respond:
            self._respond(request)

    def _deliver(self, request: Request, outcome: tuple[bool, Any]) -> None:
        actor = request.actor
        assert actor is not None
        self._requests.remove(request)
        if actor.crashed:
            outcome = (False, Crash(f"{actor.name}'s process died"))
        actor.delivered = outcome
        self._running = actor
        self._cv.notify_all()

    def _respond(self, request: Request) -> None:
        assert request.outcome is not None
        self._note(f"respond {request.number} ok={request.outcome[0]}")
        self._deliver(request, request.outcome)

    def _lose(self, request: Request) -> None:
        self._note(f"lose {request.number}")
        self._deliver(request, (False, Lost(f"response to {request.what} lost")))

    def _refuse(self, request: Request) -> None:
        self._note(f"refuse {request.number}")
        self._deliver(request, (False, Throttled(f"503 SlowDown: {request.what}")))

    def _fail(self, request: Request) -> None:
        self._note(f"fail {request.number}")
        self._deliver(request, (False, Failed(f"500 InternalError: {request.what}")))

    def _fault(self, request: Request, kind: str) -> None:
        if request.actor is not None:
            self.faulted.append((request.actor.name, self.bucket.now, kind))

    def fault(self, kind: str) -> None:
        """Note that the calling actor's request raised ``kind`` after retries."""
        actor = self.current()
        if actor is not None and not self.direct:
            self.faulted.append((actor.name, self.bucket.now, kind))

    def _time_out(self, request: Request) -> None:
        self._note(f"timeout {request.number}")
        actor = request.actor
        assert actor is not None
        orphan = Request(request.number, None, request.what, request.effect, issuer=request.issuer)
        self._deliver(request, (False, TimedOut(f"{request.what} timed out")))
        self._requests.append(orphan)

    def _apply_orphan(self, request: Request) -> None:
        self._note(f"land {request.number} {request.what}")
        self._effect(request)
        self._requests.remove(request)

    def _drop(self, request: Request) -> None:
        self._note(f"drop {request.number}")
        self._requests.remove(request)

    def _crash(self, request: Request) -> None:
        actor = request.actor
        assert actor is not None
        self._fault(request, "crash")
        self._note(f"crash {actor.process} at {request.number}")
        for other in self._actors:
            if other.process == actor.process:
                other.crashed = True
        if not request.applied and self.rng.random() < 0.5:
            orphan = Request(
                request.number, None, request.what, request.effect, issuer=request.issuer
            )
            self._requests.append(orphan)
        self._deliver(request, (False, Crash(f"{actor.name} died")))

    def _jump(self) -> None:
        seconds = self.rng.choice([0.05, 0.3, 1.0, 2.5, 6.0, 12.0])
        self._note(f"jump {seconds}")
        self.bucket.now += seconds

    def _step_clock(self) -> None:
        """Step the wall clock of a process with a request on the wire (the
        step then falls inside a request whose duration someone measures)."""
        waiting = {r.actor.process for r in self._requests if r.actor is not None}
        process = self.rng.choice(sorted(waiting or {a.process for a in self._actors}))
        by = self.rng.choice([-1.0, 0.0, 1.0]) * self.faults.step_by
        self._note(f"clock of {process} steps to {by:+.3f}")
        self.stepped[process] = by
        for actor in self._actors:
            if actor.process == process:
                self.faulted.append((actor.name, self.bucket.now, "clock_step"))

    def fingerprint(self) -> str:
        """A digest of the whole schedule: equal for equal seeds and code."""
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]

    @property
    def actors(self) -> list[Actor]:
        return list(self._actors)
