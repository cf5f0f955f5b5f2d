"""What every controller shell shares: worker threads over a work queue, retry rules, a read
view of a cache, a bounded set of deleted UIDs, and best-effort Events.

Retry rules (one place, so every controller behaves alike): a sync that returns normally is
done and its backoff forgotten; :class:`Requeue` asks to look again after a delay (a pod to
evict later); :class:`kube.Transient` with a server-given delay waits that long; anything
else is retried with the queue's per-key exponential backoff and logged.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.objects import Obj
from dra_solver.controllers.workqueue import ExponentialBackoff, WorkQueue
from dra_solver.service.api import Store, kube

log = logging.getLogger(__name__)


class Requeue(Exception):
    """Look at this key again after ``delay`` seconds (not a failure: no backoff growth)."""

    def __init__(self, delay: float, why: str = "") -> None:
        super().__init__(why or f"again in {delay:.1f}s")
        self.delay = delay


class Retry(Exception):
    """A failure to retry with backoff, already explained (logged at info level, no trace)."""


class StoreView(Mapping[str, Obj]):
    """A cache seen as a read-only mapping ``key -> object`` (what the pure functions take)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getitem__(self, k: str) -> Obj:
        item = self._store.get(k)
        if item is None:
            raise KeyError(k)
        return item

    def get(self, k: str, default: Any = None) -> Any:
        item = self._store.get(k)
        return default if item is None else item

    def __contains__(self, k: object) -> bool:
        return isinstance(k, str) and self._store.get(k) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.keys())

    def __len__(self) -> int:
        return len(self._store)


class UIDCache:
    """The most recent ``size`` UIDs added (pods seen deleted, pods already evicted)."""

    def __init__(self, size: int = 500) -> None:
        self.size = size
        self._items: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, uid: str) -> None:
        with self._lock:
            self._items[uid] = None
            self._items.move_to_end(uid)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._items

    def snapshot(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._items)


EVENT_SENDERS = 32
"""Events sent at once by default: 16 fell behind (and the queue dropped) at 180 binds a second
on a loaded 2-core machine."""


class Events:
    """Best-effort core/v1 Events, as kubectl describe shows them; failures are only logged.

    Identical events for one object within ``dedupe`` seconds are sent once. Events are sent by
    background threads (``senders`` of them), as client-go's event broadcaster sends them, so a
    worker never waits for one (one API round trip per scheduled pod was a sixth of the
    scheduler's time); at most ``max_pending`` wait to be sent, newer ones are dropped beyond
    that, as the broadcaster drops when its queue is full.

    An event the API server could not take (connection refused, timeout, 429, 5xx) is tried
    again ``retry_after`` seconds later (plus up to a quarter more, so restarted clients do not
    knock in step), at most ``max_tries`` times in all, as client-go's broadcaster does: a
    Scheduled event emitted while the API server restarts is recorded once it is back. An event
    it rejected (400, 403, 422) is not tried again.
    """

    def __init__(self, kube_api: kube.Kube | None, component: str, *, dedupe: float = 60.0,
                 clock: Callable[[], float] = time.time, max_pending: int = 1000, senders: int = EVENT_SENDERS,
                 retry_after: float = 10.0, max_tries: int = 12, on_drop: Callable[[int], None] | None = None) -> None:
        self.kube = kube_api
        self._on_drop = on_drop
        self.component = component
        self.dedupe = dedupe
        self.max_pending = max_pending
        self._clock = clock
        self._last: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()
        self.retry_after = retry_after
        self.max_tries = max_tries
        self._pending: deque[tuple[str, Obj, int]] = deque()
        self._retries: list[tuple[float, int, str, Obj, int]] = []
        """A heap of (due on the monotonic clock, sequence, namespace, event, tries so far)."""
        self._retry_seq = 0
        self._cond = threading.Condition()
        self._sending = 0
        self._senders: list[threading.Thread] = []
        self._max_senders = senders
        self.dropped = 0

    def emit(self, obj: ob.Obj | dict[str, Any], kind: str, *, type_: str, reason: str, message: str) -> None:
        if self.kube is None:
            return
        now = self._clock()
        ident = (ob.uid(obj) or ob.key(obj), reason, message)
        with self._lock:
            if now - self._last.get(ident, -1e18) < self.dedupe:
                return
            self._last[ident] = now
            if len(self._last) > 10_000:
                self._last.clear()
        stamp = ob.format_time(now)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ob.name(obj)}.", "namespace": ob.namespace(obj) or "default"},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion") or "v1",
                "kind": kind,
                "name": ob.name(obj),
                "namespace": ob.namespace(obj),
                "uid": ob.uid(obj),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with self._cond:
            waiting = len(self._pending) + len(self._retries)
            if waiting >= self.max_pending:
                self._drop(1)
                log.debug("event %s for %s dropped: %d events waiting to be sent", reason, ob.key(obj), waiting)
                return
            self._pending.append((ob.namespace(obj) or "default", event, 0))
            self._senders = [t for t in self._senders if t.is_alive()]
            if len(self._senders) < self._max_senders and len(self._pending) > len(self._senders) - self._sending:
                sender = threading.Thread(target=self._send_loop, name=f"events-{self.component}", daemon=True)
                self._senders.append(sender)
                sender.start()
            self._cond.notify()

    def _next(self) -> tuple[str, Obj, int]:
        """The next event to send: a new one, else a retry that is due (called holding _cond)."""
        while True:
            if self._pending:
                return self._pending.popleft()
            if not self._retries:
                self._cond.wait()
                continue
            wait = self._retries[0][0] - time.monotonic()
            if wait <= 0:
                _, _, namespace, event, tries = heapq.heappop(self._retries)
                return namespace, event, tries
            self._cond.wait(wait)

    def _send_loop(self) -> None:
        assert self.kube is not None
        while True:
            with self._cond:
                namespace, event, tries = self._next()
                self._sending += 1
            try:
                self.kube.create_event(namespace, event)
            except kube.Transient as err:
                self._retry_later(namespace, event, tries + 1, err)
            except kube.ApiError as err:
                log.debug("event %s for %s not recorded: %s", event["reason"], event["involvedObject"]["name"], err)
            except Exception:  # the sender must outlive any surprise
                log.exception("event %s not recorded", event["reason"])
            finally:
                with self._cond:
                    self._sending -= 1
                    self._cond.notify_all()

    def _retry_later(self, namespace: str, event: Obj, tries: int, err: kube.ApiError) -> None:
        what = f"event {event['reason']} for {event['involvedObject']['name']}"
        if tries >= self.max_tries:
            log.warning("%s not recorded after %d tries: %s", what, tries, err)
            with self._cond:
                self._drop(1)
            return
        delay = self.retry_after * (1.0 + 0.25 * random.random())
        log.debug("%s not recorded (try %d of %d), trying again in %.1fs: %s", what, tries, self.max_tries, delay, err)
        with self._cond:
            self._retry_seq += 1
            heapq.heappush(self._retries, (time.monotonic() + delay, self._retry_seq, namespace, event, tries))
            self._cond.notify_all()

    def _drop(self, count: int) -> None:
        """Count ``count`` events as never recorded (called holding _cond)."""
        self.dropped += count
        if self._on_drop is not None:
            self._on_drop(count)

    def idle(self) -> bool:
        """Nothing waiting to be sent or tried again, and nothing being sent."""
        with self._cond:
            return not self._pending and not self._sending and not self._retries

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event emitted so far was sent (or ``timeout``); True when idle."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._sending or self._retries:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def discard(self) -> int:
        """Drop what is still waiting to be sent (on shutdown, after :meth:`flush` had its
        chance: a stopping process must not keep knocking on an API server); how many."""
        with self._cond:
            left = len(self._pending) + len(self._retries)
            self._pending.clear()
            self._retries.clear()
            if left:
                self._drop(left)
            self._cond.notify_all()
        return left


class Runner:
    """``workers`` threads taking keys from ``queue`` and calling ``sync(key)``."""

    def __init__(
        self,
        name: str,
        queue: WorkQueue[str],
        sync: Callable[[str], None],
        *,
        workers: int = 1,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.name = name
        self.queue = queue
        self.sync = sync
        self.workers = workers
        self.metrics = metrics
        self._threads: list[threading.Thread] = []
        self.syncs = 0
        self.failures = 0

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self.queue.shutdown()
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self.process(key)
            finally:
                self.queue.done(key)

    def process(self, key: str) -> None:
        """One sync with the retry rules (also used by tests to run a key synchronously)."""
        self.syncs += 1
        try:
            self.sync(key)
        except Requeue as again:
            self.queue.forget(key)
            self.queue.add_after(key, again.delay)
            return
        except kube.Transient as err:
            self._failed(key, err, delay=err.delay)
            return
        except (Retry, kube.ApiError) as err:
            self._failed(key, err)
            return
        except Exception as err:
            log.exception("%s: sync %s failed", self.name, key)
            self._failed(key, err, quiet=True)
            return
        self.queue.forget(key)

    def _failed(self, key: str, err: Exception, *, delay: float = 0.0, quiet: bool = False) -> None:
        self.failures += 1
        if self.metrics is not None:
            self.metrics.queue_retries.labels(name=self.name).inc()
        if not quiet:
            log.info("%s: %s: %s (will retry)", self.name, key, err)
        if delay > 0:
            self.queue.add_after(key, delay)
        else:
            self.queue.add_rate_limited(key)


def new_queue(name: str, metrics: ControllerMetrics | None, *, base: float = 0.005, cap: float = 1000.0) -> WorkQueue[str]:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(base=base, cap=cap)
    if metrics is None:
        return WorkQueue(name, backoff=backoff)
    # The queue's own series, looked up once (every add and every hand-out reports).
    depth, waited = metrics.queue_depth.labels(name=name), metrics.queue_duration.labels(name=name)
    return WorkQueue(name, backoff=backoff, on_depth=depth.set, on_wait=waited.observe)
