"""List+watch caches (informers) with event handlers, as client-go's shared informers.

An :class:`Informer` lists one resource, then watches from the list's resourceVersion; a
watch that ends resumes from the last version seen, and ``410 Gone`` (the version is too old)
triggers a fresh list whose differences reach the handlers as add/update/delete, so handlers
never miss a change. Handlers run on the informer's thread and must only enqueue work.

The :class:`Store` behind it also holds objects the controllers wrote themselves until the
watch catches up (client-go's mutation cache): a controller that created a claim must not
create it again because its cache has not seen the create yet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi import meta as ob
from dra_solver.service.kubeapi.direct import loads
from dra_solver.service.kubeapi.meta import Obj

log = logging.getLogger(__name__)

Handler = Callable[[Obj | None, Obj | None], None]
"""Called with (old, new): add = (None, obj), update = (old, new), delete = (obj, None)."""


IndexFunc = Callable[[Obj], list[str]]


def without_managed_fields(obj: Obj) -> Obj:
    """``obj`` with ``metadata.managedFields`` dropped (in place), as client-go's
    ``TransformStripManagedFields`` does for a cache: often half of an object's metadata, read
    by none of our components, and an update that omits it leaves the server's unchanged
    (Server-Side Apply keeps managedFields that a write does not set)."""
    m = obj.get("metadata")
    if type(m) is dict:
        m.pop("managedFields", None)
    return obj


class Store:
    """Objects by key, plus objects we wrote that the watch has not delivered yet.

    Indexes (name -> function from object to index values) are kept for the effective copy
    of each object, assumed or not, like client-go's indexers. Objects are kept without their
    managed fields (:func:`without_managed_fields`): what is written back from here sends none.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, Obj] = {}
        self._assumed: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._index: dict[str, dict[str, set[str]]] = {}
        self._indexed: dict[str, dict[str, list[str]]] = {}
        self._tombstones: OrderedDict[str, int] = OrderedDict()
        self._version = 0
        """Counts changes: what :meth:`objects` last listed holds while it is unchanged."""
        self._listed: tuple[int, list[Obj]] = (-1, [])
        self._mapped: tuple[int, dict[str, Obj]] = (-1, {})

    def add_index(self, name: str, func: IndexFunc) -> None:
        with self._lock:
            self._indexers[name] = func
            self._index[name] = {}
            self._indexed[name] = {}
            for k in self.keys():
                self._reindex_one(name, k)

    def by_index(self, name: str, value: str) -> list[Obj]:
        with self._lock:
            out = []
            for k in sorted(self._index[name].get(value, ())):
                item = self.get(k)
                if item is not None:
                    out.append(item)
            return out

    def _reindex(self, k: str) -> None:
        for name in self._indexers:
            self._reindex_one(name, k)

    def _reindex_one(self, name: str, k: str) -> None:
        index = self._index[name]
        for value in self._indexed[name].pop(k, []):
            members = index.get(value)
            if members is not None:
                members.discard(k)
                if not members:
                    del index[value]
        item = self.get(k)
        if item is None:
            return
        try:
            values = sorted(set(self._indexers[name](item)))
        except Exception:  # an index function must not break the cache
            log.exception("index %s failed for %s", name, k)
            return
        self._indexed[name][k] = values
        for value in values:
            index.setdefault(value, set()).add(k)

    def get(self, key: str) -> Obj | None:
        with self._lock:
            item = self._items.get(key)
            mine = self._assumed.get(key)
            if mine is not None and ob.rv_int(mine) > ob.rv_int(item):
                return mine
            return item

    def objects(self) -> list[Obj]:
        """Every object, by key (a new list; listed again only after a change: a scheduler
        lists the nodes on every attempt)."""
        with self._lock:
            version, listed = self._listed
            if version == self._version:
                return list(listed)
            keys = sorted(set(self._items) | set(self._assumed))
            out = []
            for k in keys:
                item = self.get(k)
                if item is not None:
                    out.append(item)
            self._listed = (self._version, out)
            return list(out)

    def shared_by_key(self) -> Mapping[str, Obj]:
        """:meth:`by_key`'s mapping itself, not a copy: the same object until the store
        changes, so a caller can tell nothing changed by its identity. Read only."""
        with self._lock:
            version, mapped = self._mapped
            if version != self._version:
                mapped = {ob.key(o): o for o in self.objects()}
                self._mapped = (self._version, mapped)
            return mapped

    def by_key(self) -> dict[str, Obj]:
        """Every object by key, in key order (a new dict; built again only after a change)."""
        return dict(self.shared_by_key())

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(set(self._items) | set(self._assumed))

    def __len__(self) -> int:
        with self._lock:
            return len(set(self._items) | set(self._assumed))

    def assume(self, obj: Obj) -> None:
        """Remember an object we just wrote (the API's answer) until the watch shows it."""
        if ob.deleting(obj) and not ob.finalizers(obj):
            return  # the write removed it; the watch will say so
        with self._lock:
            k = ob.key(obj)
            if ob.rv_int(obj) <= self._tombstones.get(k, 0):
                return  # already seen deleted: do not bring it back
            if ob.rv_int(obj) > ob.rv_int(self._items.get(k)):
                self._assumed[k] = without_managed_fields(obj)
                self._version += 1
                self._reindex(k)

    def forget_assumed(self, key: str) -> None:
        with self._lock:
            if self._assumed.pop(key, None) is not None:
                self._version += 1
            self._reindex(key)

    def _apply(self, event: str, obj: Obj) -> tuple[Obj | None, Obj | None]:
        without_managed_fields(obj)
        k = ob.key(obj)
        with self._lock:
            self._version += 1
            # Handlers see the change from the previous version the API server sent, as
            # client-go's do: comparing with our own assumed write instead would hide what
            # others changed before it (a claim freed, a pod's claim statuses) and lose wakeups.
            old = self._items.get(k)
            mine = self._assumed.get(k)
            if mine is not None and ob.rv_int(obj) >= ob.rv_int(mine):
                del self._assumed[k]
            if event == "DELETED":
                self._tombstones[k] = ob.rv_int(obj)
                self._tombstones.move_to_end(k)
                while len(self._tombstones) > 10_000:
                    self._tombstones.popitem(last=False)
                self._items.pop(k, None)
                self._assumed.pop(k, None)
                self._reindex(k)
                return old, None
            self._items[k] = obj
            self._reindex(k)
            return old, self.get(k)

    def _replace(self, items: list[Obj]) -> list[tuple[Obj | None, Obj | None]]:
        with self._lock:
            fresh = {ob.key(i): i for i in items}
            changes: list[tuple[Obj | None, Obj | None]] = []
            for k in sorted(set(self._items) - set(fresh)):
                changes.append(self._apply("DELETED", self._items[k]))
            for k in sorted(fresh):
                old = self._items.get(k)
                if old is not None and ob.resource_version(old) == ob.resource_version(fresh[k]):
                    continue
                changes.append(self._apply("MODIFIED", fresh[k]))
            return changes


@dataclass
class InformerStats:
    lists: int = 0
    relists_after_gone: int = 0
    watch_restarts: int = 0
    errors: int = 0


class Informer:
    def __init__(
        self,
        source: kube.ListSource,
        *,
        watch_timeout: int = 300,
        retry_delay: float = 1.0,
        on_relist: Callable[[str], None] | None = None,
        on_listed: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self.store = Store()
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self.stats = InformerStats()
        self.on_relist = on_relist
        """Called with the name after a 410 Gone, before listing again."""
        self.on_listed = on_listed
        """Called with the name after every list (handlers have seen its changes): an empty
        list changes nothing, so this is how a consumer learns the first sync happened."""
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rv = ""
        self._watch: Any = None
        self.served = True
        """False when an optional resource is not served by this API server."""

    @property
    def name(self) -> str:
        return self.source.name

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
            self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end (returns at once; :meth:`stop` also waits)."""
        self._stop.set()
        self._close_watch()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is None:
            return
        # The watch may be opening right now: keep closing it until the thread is out.
        deadline = time.monotonic() + 5
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._close_watch()
            self._thread.join(0.05)

    def _close_watch(self) -> None:
        w = self._watch
        if w is None:
            return
        w.stop()  # only a flag, checked between events: an idle watch needs its socket shut too
        resp = getattr(w, "_resp", None)
        if resp is not None:
            try:
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
            except Exception:  # already closed by the reading thread
                log.debug("%s: closing the watch", self.name, exc_info=True)

    def _notify(self, old: Obj | None, new: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(old, new)
            except Exception:  # a handler bug must not stop the cache
                log.exception("%s: event handler failed", self.name)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list()
                while not self._stop.is_set():
                    self._watch_once()
            except kube.Gone:
                self.stats.relists_after_gone += 1
                log.info("watch %s: 410 Gone, listing again", self.name)
                if self.on_relist:
                    self.on_relist(self.name)
                continue
            except kube.NotFound as err:
                if self.source.optional:
                    if self.served:
                        log.info("%s not served by this API server; treating as empty", self.name)
                    self.served = False
                    for change in self.store._replace([]):
                        self._notify(*change)
                    self._synced.set()
                    if self.on_listed:
                        self.on_listed(self.name)
                    self._stop.wait(30)
                    continue
                self.stats.errors += 1
                log.warning("list/watch %s: %s", self.name, err)
            except Exception as err:
                if self._stop.is_set():
                    return
                self.stats.errors += 1
                log.warning("list/watch %s: %s", self.name, err)
            self._stop.wait(self.retry_delay)

    def _list(self) -> None:
        try:
            resp = self.source.list_fn(_preload_content=False, _request_timeout=kube.REQUEST_TIMEOUT)
            body = loads(resp.data)
        except Exception as err:
            raise kube.wrap(err, f"list {self.name}") from err
        items = [self._typed(i) for i in body.get("items") or []]
        self._rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.served = True
        self.stats.lists += 1
        for change in self.store._replace(items):
            self._notify(*change)
        self._synced.set()
        if self.on_listed:
            self.on_listed(self.name)

    def _typed(self, item: Obj) -> Obj:
        # List items omit apiVersion/kind; writing them back needs both.
        item.setdefault("apiVersion", self.source.api_version)
        item.setdefault("kind", self.source.kind)
        return item

    def _events(self) -> Iterator[dict[str, Any]]:
        w = kube.json_watch()
        self._watch = w
        try:
            yield from w.stream(
                self.source.list_fn,
                resource_version=self._rv,
                timeout_seconds=self.watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(10.0, self.watch_timeout + 30.0),
            )
        finally:
            self._watch = None

    def _watch_once(self) -> None:
        self.stats.watch_restarts += 1
        try:
            for event in self._events():
                if self._stop.is_set():
                    return
                etype = event.get("type")
                obj = event.get("raw_object")
                if not isinstance(obj, dict):
                    continue
                rv = ob.resource_version(obj)
                if etype == "BOOKMARK":
                    self._rv = rv or self._rv
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                if rv:
                    self._rv = rv
                self._notify(*self.store._apply(str(etype), self._typed(obj)))
        except Exception as err:
            if self._stop.is_set():
                return
            raise kube.wrap(err, f"watch {self.name}") from err


def wait_for_sync(informers: list[Informer], *, timeout: float, stop: threading.Event | None = None) -> bool:
    """True once every informer has listed (False on timeout or when ``stop`` is set)."""
    deadline = time.monotonic() + timeout
    for informer in informers:
        while not informer.has_synced():
            if stop is not None and stop.is_set():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            informer.wait_synced(min(remaining, 0.1))
    return True
