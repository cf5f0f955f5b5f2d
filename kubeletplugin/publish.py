"""Publishing the node's devices as ResourceSlices: the solver's inventory comes from here.

The node's devices form one pool (pool name = node name, ``spec.nodeName`` = node name). The
pool is split into slices within the API server's limits:

- shared counter sets go into slices of their own (a slice holds ``sharedCounters`` *or*
  ``devices``, never both), at most 8 sets per slice;
- devices go into slices of at most 128, or 64 when any device of the pool has taints or
  consumes counters (the lower limit upstream applies to such slices; using it for the whole
  pool keeps the layout stable when a taint comes and goes).

Slice names are deterministic (``<node>-<driver>-<index>``), so a restarted plugin finds and
updates its own slices instead of piling up new ones. Every change of content bumps the pool
generation and rewrites all slices of the pool; consumers use only the newest generation and
treat a pool with fewer slices than ``resourceSliceCount`` as incomplete, so they never see a
mix. Slices that are no longer wanted (fewer devices, or another layout) are deleted first.
Taint times (``timeAdded``) of devices that stay tainted are carried over from the published
slices, as upstream's ResourceSlice controller does.

Objects are plain ``resource.k8s.io/v1`` JSON dicts. Two sinks write them: a directory of YAML
files (read by the solver service's file inventory, no API server needed) and the Kubernetes
API through the shared client layer (``service.kubeapi``), with an owner reference to the Node
so the slices go away with it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from dra_solver.kubeletplugin import fsutil
from dra_solver.kubeletplugin.discovery import NodeDevices
from dra_solver.service.api import kube

log = logging.getLogger(__name__)

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_COUNTER_SETS = 8
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "dra-solver-kubelet-plugin"


class PublishError(Exception):
    """A sink operation failed; the publish loop logs it and tries again later."""


# --- pure: what to publish --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceContent:
    """One slice's payload: either shared counters or devices."""

    devices: tuple[Json, ...] = ()
    shared_counters: tuple[Json, ...] = ()

    def spec_part(self) -> Json:
        if self.shared_counters:
            return {"sharedCounters": [dict(c) for c in self.shared_counters]}
        return {"devices": [dict(d) for d in self.devices]}


def _chunks(items: Sequence[Json], size: int) -> list[tuple[Json, ...]]:
    return [tuple(items[i : i + size]) for i in range(0, len(items), size)]


def split_pool(
    node_devices: NodeDevices, *, taints: Mapping[str, Sequence[Json]]
) -> list[SliceContent]:
    """The pool's slices in order: counter-set slices first, then device slices (pure)."""
    devices: list[Json] = []
    for info in node_devices.devices:
        device = info.to_api()
        device_taints = taints.get(info.name)
        if device_taints:
            device["taints"] = [dict(t) for t in device_taints]
        devices.append(device)
    counter_sets = [c.to_api() for c in node_devices.counter_sets]
    # The API server's limit for a slice drops to 64 as soon as one of its devices has taints
    # or consumes counters; deciding per pool instead of per slice keeps all slices alike.
    advanced = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if advanced else MAX_DEVICES
    out = [SliceContent(shared_counters=c) for c in _chunks(counter_sets, MAX_COUNTER_SETS)]
    out += [SliceContent(devices=c) for c in _chunks(devices, limit)]
    if not out:
        out.append(SliceContent())  # an empty pool still exists: one slice without devices
    return out


_NAME_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def slice_name(node: str, driver: str, index: int) -> str:
    """``<node>-<driver>-<index>``, a valid object name (DNS subdomain) of at most 253 chars."""
    base = _NAME_UNSAFE.sub("-", f"{node}-{driver}".lower()).strip("-.")
    suffix = f"-{index}"
    if len(base) + len(suffix) > 253:
        digest = hashlib.sha256(base.encode()).hexdigest()[:10]
        base = base[: 253 - len(suffix) - 11].rstrip("-.") + "-" + digest
    return base + suffix


def build_slices(
    contents: Sequence[SliceContent],
    *,
    driver: str,
    node: str,
    generation: int,
    owner: Json | None,
) -> list[Json]:
    """Complete ResourceSlice objects for the pool at ``generation`` (pure)."""
    out: list[Json] = []
    for index, content in enumerate(contents):
        metadata: Json = {
            "name": slice_name(node, driver, index),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        }
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {
                        "name": node,
                        "generation": generation,
                        "resourceSliceCount": len(contents),
                    },
                    **content.spec_part(),
                },
            }
        )
    return out


def _canonical_time(value: Any) -> Any:
    # "2026-01-01T00:00:00+00:00" (how the kubernetes client serialises) == "...Z" (the server).
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def _prune(value: Any) -> Any:
    # The API server omits empty lists/maps (omitempty); compare without them.
    if isinstance(value, dict):
        pruned = {
            k: _canonical_time(v) if k == "timeAdded" else _prune(v) for k, v in value.items()
        }
        return {k: v for k, v in pruned.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def spec_key(obj: Mapping[str, Any]) -> str:
    """What decides whether a published slice is up to date: its spec, normalised."""
    return json.dumps(_prune(obj.get("spec") or {}), sort_keys=True)


def carry_taint_times(
    taints: Mapping[str, Sequence[Json]], existing: Sequence[Mapping[str, Any]]
) -> dict[str, list[Json]]:
    """Keep ``timeAdded`` of taints that are already published unchanged (pure)."""
    published: dict[tuple[str, str, str | None, str], str] = {}
    for obj in existing:
        for device in (obj.get("spec") or {}).get("devices") or []:
            for t in device.get("taints") or []:
                if t.get("timeAdded"):
                    key = (
                        device.get("name", ""),
                        t.get("key", ""),
                        t.get("value"),
                        t.get("effect", ""),
                    )
                    published[key] = t["timeAdded"]
    out: dict[str, list[Json]] = {}
    for name, device_taints in taints.items():
        out[name] = []
        for t in device_taints:
            key = (name, t.get("key", ""), t.get("value"), t.get("effect", ""))
            kept = published.get(key)
            out[name].append(
                {**t, "timeAdded": _canonical_time(kept) if kept else t.get("timeAdded")}
            )
    return out


# --- sinks ------------------------------------------------------------------------------------


class SliceSink(Protocol):
    def list(self) -> list[Json]:
        """This driver's slices of this node, as published."""
        ...

    def create(self, obj: Json) -> None: ...

    def update(self, obj: Json) -> None:
        """Replace the slice named in ``obj`` (which carries the listed resourceVersion)."""
        ...

    def delete(self, obj: Json) -> None: ...

    def owner(self) -> Json | None:
        """The owner reference for new slices (the Node), if the sink can know it."""
        ...


class DirectorySink:
    """One ``<slice name>.yaml`` per slice; other nodes' and drivers' files are left alone."""

    def __init__(self, directory: Path, *, driver: str, node: str) -> None:
        self.directory = directory
        self.driver = driver
        self.node = node

    def _path(self, obj: Mapping[str, Any]) -> Path:
        return self.directory / f"{obj['metadata']['name']}.yaml"

    def list(self) -> list[Json]:
        out: list[Json] = []
        if not self.directory.is_dir():
            return out
        for path in sorted(self.directory.glob("*.yaml")):
            try:
                docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
            except (OSError, yaml.YAMLError) as err:
                log.warning("publish: ignoring unreadable %s: %s", path, err)
                continue
            for doc in docs:
                spec = doc.get("spec") if isinstance(doc, dict) else None
                if (
                    isinstance(spec, dict)
                    and doc.get("kind") == "ResourceSlice"
                    and spec.get("driver") == self.driver
                    and spec.get("nodeName") == self.node
                    and path.stem == (doc.get("metadata") or {}).get("name")
                ):
                    out.append(doc)
        return out

    def _write(self, obj: Json) -> None:
        try:
            fsutil.ensure_dir(self.directory, mode=0o755, enforce=False)
            text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
            fsutil.write_atomic(self._path(obj), text.encode(), mode=0o644)
        except OSError as err:
            raise PublishError(f"write {self._path(obj)}: {err}") from None

    def create(self, obj: Json) -> None:
        self._write(obj)

    def update(self, obj: Json) -> None:
        self._write(obj)

    def delete(self, obj: Json) -> None:
        try:
            fsutil.remove_durably(self._path(obj))
        except OSError as err:
            raise PublishError(f"delete {self._path(obj)}: {err}") from None

    def owner(self) -> Json | None:
        return None  # no API server, no Node UID: ownerReferences need one


class KubeSliceSink:
    """ResourceSlices through the shared client layer (``service.kubeapi``).

    Exactly the calls the kubelet-plugin RBAC in ``deploy/`` grants: list, create, update and
    delete of resourceslices, plus ``get`` on the Node for the owner reference. Objects stay
    the API's JSON both ways, so no field is lost to the client's generated models.
    """

    def __init__(self, api_client: Any, *, driver: str, node: str) -> None:
        self._kube = kube.Kube(api_client)
        self.driver = driver
        self.node = node
        self._owner: Json | None = None

    def list(self) -> list[Json]:
        selector = f"spec.nodeName={self.node},spec.driver={self.driver}"
        try:
            data = self._kube.read(
                "list resourceslices",
                self._kube.resource.list_resource_slice,
                field_selector=selector,
            )
        except kube.ApiError as err:
            raise PublishError(str(err)) from None
        items = data.get("items") or []
        for item in items:  # list items come without kind/apiVersion
            item.setdefault("apiVersion", API_VERSION)
            item.setdefault("kind", "ResourceSlice")
        return [i for i in items if (i.get("spec") or {}).get("nodeName") == self.node]

    def _write(self, verb: str, method: str, obj: Json, **params: Any) -> None:
        name = obj["metadata"]["name"]
        try:
            self._kube.write(f"{verb} resourceslice {name}", self._kube.resource, method, **params)
        except kube.NotFound:
            if verb != "delete":
                raise PublishError(f"{verb} resourceslice {name}: not found") from None
            # already gone is what we wanted
        except kube.ApiError as err:
            raise PublishError(str(err)) from None

    def create(self, obj: Json) -> None:
        self._write("create", "create_resource_slice", obj, body=obj)

    def update(self, obj: Json) -> None:
        name = obj["metadata"]["name"]
        self._write("update", "replace_resource_slice", obj, name=name, body=obj)

    def delete(self, obj: Json) -> None:
        self._write("delete", "delete_resource_slice", obj, name=obj["metadata"]["name"])

    def owner(self) -> Json | None:
        if self._owner is None:
            try:
                node = self._kube.read(
                    f"get node {self.node}", self._kube.core.read_node, self.node
                )
            except kube.ApiError as err:
                log.warning("publish: no owner reference for the slices: %s", err)
                return None
            uid = (node.get("metadata") or {}).get("uid")
            if uid:
                self._owner = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node,
                    "uid": uid,
                    "controller": True,
                }
        return self._owner


# --- the publisher ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncResult:
    generation: int
    changed: bool
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


class Publisher:
    """Brings the sink in line with the desired pool; one call, one consistent generation."""

    def __init__(self, sink: SliceSink, *, driver: str, node: str) -> None:
        self.sink = sink
        self.driver = driver
        self.node = node

    def sync(
        self, node_devices: NodeDevices, *, taints: Mapping[str, Sequence[Json]]
    ) -> SyncResult:
        existing = [
            s
            for s in self.sink.list()
            if ((s.get("spec") or {}).get("pool") or {}).get("name") == self.node
        ]
        generation = max(
            (
                int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)
                for s in existing
            ),
            default=0,
        )
        contents = split_pool(node_devices, taints=carry_taint_times(taints, existing))
        owner = self.sink.owner()
        by_name = {s["metadata"]["name"]: s for s in existing}

        current = build_slices(
            contents, driver=self.driver, node=self.node, generation=generation, owner=owner
        )
        if len(existing) == len(current) and all(
            d["metadata"]["name"] in by_name
            and spec_key(by_name[d["metadata"]["name"]]) == spec_key(d)
            for d in current
        ):
            return SyncResult(generation=generation, changed=False)

        generation += 1
        desired = build_slices(
            contents, driver=self.driver, node=self.node, generation=generation, owner=owner
        )
        wanted = {d["metadata"]["name"] for d in desired}
        deleted: list[str] = []
        for name in sorted(set(by_name) - wanted):
            self.sink.delete(by_name[name])
            deleted.append(name)
        created: list[str] = []
        updated: list[str] = []
        for obj in desired:
            name = obj["metadata"]["name"]
            old = by_name.get(name)
            if old is None:
                self.sink.create(obj)
                created.append(name)
            else:
                resource_version = (old.get("metadata") or {}).get("resourceVersion")
                if resource_version:
                    obj["metadata"]["resourceVersion"] = resource_version
                if owner is None and (old.get("metadata") or {}).get("ownerReferences"):
                    obj["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"]
                self.sink.update(obj)
                updated.append(name)
        log.info(
            "published pool %s generation %d: %d slice(s), %d device(s) (created %d, updated %d, deleted %d)",
            self.node,
            generation,
            len(desired),
            len(node_devices.devices),
            len(created),
            len(updated),
            len(deleted),
        )
        return SyncResult(
            generation=generation,
            changed=True,
            created=tuple(created),
            updated=tuple(updated),
            deleted=tuple(deleted),
        )


class PublishLoop:
    """Publishes at start, on every health change, and every ``resync_seconds`` (repairs drift)."""

    def __init__(
        self,
        publisher: Publisher,
        devices: Callable[[], NodeDevices],
        taints: Callable[[], Mapping[str, Sequence[Json]]],
        *,
        resync_seconds: float,
        retry_seconds: float = 2.0,
    ) -> None:
        self.publisher = publisher
        self.devices = devices
        self.taints = taints
        self.resync_seconds = resync_seconds
        self.retry_seconds = retry_seconds
        self._kick = threading.Event()
        self.synced = threading.Event()
        self.last_result: SyncResult | None = None

    def kick(self) -> None:
        self._kick.set()

    def run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            self._kick.clear()
            try:
                self.last_result = self.publisher.sync(self.devices(), taints=self.taints())
                self.synced.set()
                failures = 0
                wait = self.resync_seconds
            except PublishError as err:
                failures += 1
                wait = min(self.retry_seconds * 2 ** min(failures - 1, 5), self.resync_seconds)
                log.warning("publish: %s (retrying in %.0fs)", err, wait)
            self._kick.wait(wait)
