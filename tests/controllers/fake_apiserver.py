"""An in-process HTTP server speaking the part of the Kubernetes REST API the controllers use,
so the real ``kubernetes`` client (and through it our client layer) can be tested end to end.

What it does like the API server:

- resources: pods (+ status, binding), nodes, events, leases, and resource.k8s.io resource
  claims (+ status), claim templates, slices, device classes, DeviceTaintRules (served at
  v1, v1beta2 and v1alpha3);
- list (namespaced or across namespaces) with the collection's resourceVersion; watch as a
  chunked stream of JSON events from a resourceVersion (replayed from history), ``410 Gone``
  (an ERROR event) for versions older than the last :meth:`FakeApiServer.compact`,
  ``timeoutSeconds``;
- get, create (``generateName``, uid, creationTimestamp, 409 AlreadyExists), update with the
  resourceVersion as precondition (409 Conflict), status subresources (an update of the main
  resource keeps the status, a status update keeps everything else), merge / strategic-merge
  (lists merged by key for the fields we patch) / JSON patches with ``metadata.uid`` and
  ``metadata.resourceVersion`` in the body as preconditions, pods/binding (409 when already
  bound), delete with UID/resourceVersion preconditions, finalizers (delete sets
  deletionTimestamp; removing the last finalizer removes the object), and background garbage
  collection of objects whose controlling owner was deleted.

Test hooks: :meth:`inject` fails matching requests with a chosen status; ``on_write`` hooks see
every stored change (an invariant checker can record violations); every request is logged
with its user agent.
"""

from __future__ import annotations

import builtins
import copy
import itertools
import json
import queue
import random
import re
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()

    def api_version(self, version: str | None = None) -> str:
        v = version or self.versions[0]
        return f"{self.group}/{v}" if self.group else v


RESOURCES = (
    Resource("", ("v1",), "pods", "Pod", True, frozenset({"status", "binding"})),
    Resource("", ("v1",), "nodes", "Node", False, frozenset({"status"})),
    Resource("", ("v1",), "events", "Event", True),
    Resource("coordination.k8s.io", ("v1",), "leases", "Lease", True),
    Resource("resource.k8s.io", ("v1",), "resourceclaims", "ResourceClaim", True, frozenset({"status"})),
    Resource("resource.k8s.io", ("v1",), "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("resource.k8s.io", ("v1",), "resourceslices", "ResourceSlice", False),
    Resource("resource.k8s.io", ("v1",), "deviceclasses", "DeviceClass", False),
    Resource("resource.k8s.io", ("v1", "v1beta2", "v1alpha3"), "devicetaintrules", "DeviceTaintRule", False, frozenset({"status"})),
)
BY_PLURAL = {r.plural: r for r in RESOURCES}
BY_KIND = {r.kind: r for r in RESOURCES}

MERGE_KEYS = {
    "conditions": "type",
    "resourceClaimStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "ownerReferences": "uid",
    "tolerations": "key",
}
"""List fields that a strategic merge patch merges by key (as the API's patchMergeKey says)."""


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> Obj:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code}


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    code: int
    times: int
    reason: str = ""
    hits: int = 0


@dataclass
class Request:
    method: str
    path: str
    user_agent: str
    status: int = 0
    watch: bool = False

    def rbac(self) -> tuple[str, str, str] | None:
        """(apiGroup, resource[/subresource], verb) as RBAC authorizes this request."""
        parts = [p for p in self.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[3:]
        else:
            return None
        if len(rest) >= 2 and rest[0] == "namespaces":
            rest = rest[2:]
        if not rest:
            return None
        resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
        named = len(rest) >= 2
        verb = {
            "GET": "watch" if self.watch else ("get" if named else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection",
        }[self.method]
        return group, resource, verb


@dataclass
class _Watcher:
    plural: str
    namespace: str | None
    events: queue.Queue[Obj | None] = field(default_factory=queue.Queue)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(original: Any, patch: Any, *, strategic: bool = False) -> Any:
    """RFC 7386 merge patch; with ``strategic`` the lists in MERGE_KEYS merge by their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(original) if isinstance(original, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            out[k] = merge_patch(out.get(k), v, strategic=strategic)
        elif strategic and isinstance(v, list) and k in MERGE_KEYS and isinstance(out.get(k), list):
            mk = MERGE_KEYS[k]
            merged = [copy.deepcopy(x) for x in out[k]]
            for item in v:
                if not isinstance(item, dict):
                    merged.append(item)
                    continue
                idx = next((i for i, x in enumerate(merged) if isinstance(x, dict) and x.get(mk) == item.get(mk)), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        merged.pop(idx)
                elif idx is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[idx] = merge_patch(merged[idx], item, strategic=True)
            out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(doc: Any, ops: list[Obj]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1] if parts else ""
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last, None)
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch op {kind}")
    return doc


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {r.plural: {} for r in RESOURCES}
        self.rv = 100
        self.compacted = 0
        self.history: list[tuple[int, str, Obj]] = []
        self.watchers: list[_Watcher] = []
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.on_write: list[Callable[[str, Obj | None, Obj | None], None]] = []
        self.gc = True
        self._stopped = False
        self._uids = itertools.count(1)
        self._rand = random.Random(7)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-apiserver", daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            if self._stopped:
                return
            self._stopped = True
            for w in self.watchers:
                w.events.put(None)
        self.server.shutdown()
        self.server.server_close()

    # --- test helpers (direct access, no HTTP) ---------------------------------------------

    def inject(self, method: str, path: str, code: int, *, times: int = 1, reason: str = "") -> Fault:
        """Fail the next ``times`` requests whose method and path (regex search) match."""
        fault = Fault(method.upper(), re.compile(path), code, times, reason)
        with self.lock:
            self.faults.append(fault)
        return fault

    def create(self, obj: Obj) -> Obj:
        res = BY_KIND[obj["kind"]]
        return copy.deepcopy(self._create(res, obj.get("metadata", {}).get("namespace", "") if res.namespaced else "", obj))

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        with self.lock:
            obj = self.objects[plural].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, plural: str, namespace: str | None = None) -> builtins.list[Obj]:
        with self.lock:
            return [copy.deepcopy(o) for (ns, _), o in sorted(self.objects[plural].items()) if namespace is None or ns == namespace]

    def put(self, obj: Obj) -> Obj:
        """Replace an object as is (no precondition, status included): a user or driver edit."""
        res = BY_KIND[obj["kind"]]
        meta = obj["metadata"]
        with self.lock:
            current = self.objects[res.plural][(meta.get("namespace", "") if res.namespaced else "", meta["name"])]
            new = copy.deepcopy(obj)
            new["metadata"] = {**current["metadata"], **{k: v for k, v in new["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")}}
            return copy.deepcopy(self._store(res, current, new))

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        self._delete(BY_PLURAL[plural], namespace, name, {})

    def compact(self) -> None:
        """Forget history: watches from any version seen so far get 410 Gone; open watches end
        (so every watcher must list again)."""
        with self.lock:
            self.compacted = self.rv
            self.rv += 1
            self.history.clear()
            for w in self.watchers:
                w.events.put(None)

    def wait_for(self, predicate: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def calls(self, user_agent_prefix: str) -> set[tuple[str, str, str]]:
        """The RBAC view of every request made with a matching user agent."""
        with self.lock:
            return {c for r in self.requests if r.user_agent.startswith(user_agent_prefix) and (c := r.rbac()) is not None}

    def writes(self, *, user_agent: str | None = None) -> builtins.list[Request]:
        return [r for r in self.requests if r.method != "GET" and (user_agent is None or r.user_agent == user_agent)]

    # --- storage ----------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, res: Resource, etype: str, obj: Obj) -> None:
        event = {"type": etype, "object": copy.deepcopy(obj)}
        self.history.append((self.rv, res.plural, event))
        ns = obj["metadata"].get("namespace", "")
        for w in self.watchers:
            if w.plural == res.plural and (w.namespace is None or w.namespace == ns):
                w.events.put(event)

    def _notify(self, res: Resource, old: Obj | None, new: Obj | None) -> None:
        for hook in self.on_write:
            hook(res.plural, copy.deepcopy(old) if old else None, copy.deepcopy(new) if new else None)

    def _create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        with self.lock:
            obj = copy.deepcopy(body)
            obj["apiVersion"] = obj.get("apiVersion") or res.api_version()
            obj["kind"] = res.kind
            meta = obj.setdefault("metadata", {})
            if res.namespaced:
                if meta.get("namespace") and meta["namespace"] != namespace:
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value: name or generateName is required")
                suffix = "".join(self._rand.choice(string.ascii_lowercase + string.digits) for _ in range(5))
                meta["name"] = meta["generateName"] + suffix
            k = (namespace if res.namespaced else "", meta["name"])
            if k in self.objects[res.plural]:
                raise ApiError(409, "AlreadyExists", f'{res.plural}{"." + res.group if res.group else ""} "{meta["name"]}" already exists')
            meta["uid"] = f"uid-{next(self._uids):06d}"
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            if res.plural == "pods":
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            meta["resourceVersion"] = self._next_rv()
            self.objects[res.plural][k] = obj
            self._emit(res, "ADDED", obj)
            self._notify(res, None, obj)
            return obj

    def _store(self, res: Resource, old: Obj, new: Obj) -> Obj:
        """Store an update; an object being deleted goes once its last finalizer does."""
        meta = new["metadata"]
        k = (meta.get("namespace", "") if res.namespaced else "", meta["name"])
        if old.get("spec") != new.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation") or 1) + 1
        meta["resourceVersion"] = self._next_rv()
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.objects[res.plural].pop(k, None)
            self._emit(res, "DELETED", new)
            self._notify(res, old, None)
            self._collect(meta["uid"])
            return new
        self.objects[res.plural][k] = new
        self._emit(res, "MODIFIED", new)
        self._notify(res, old, new)
        return new

    def _current(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self.objects[res.plural].get((namespace, name))
        if obj is None:
            group = f".{res.group}" if res.group else ""
            raise ApiError(404, "NotFound", f'{res.plural}{group} "{name}" not found')
        return obj

    def _update(self, res: Resource, namespace: str, name: str, body: Obj, sub: str) -> Obj:
        with self.lock:
            current = self._current(res, namespace, name)
            given = (body.get("metadata") or {}).get("resourceVersion")
            if given and given != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified; please apply your changes to the latest version and try again')
            if (body.get("metadata") or {}).get("uid") not in (None, "", current["metadata"]["uid"]):
                raise ApiError(409, "Conflict", f'Precondition failed: UID in object meta: {body["metadata"]["uid"]}')
            return self._apply_body(res, current, body, sub)

    def _apply_body(self, res: Resource, current: Obj, body: Obj, sub: str) -> Obj:
        new = copy.deepcopy(current)
        if sub == "status":
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            for k, v in body.items():
                if k in ("metadata", "status", "apiVersion", "kind"):
                    continue
                new[k] = copy.deepcopy(v)
            for k in list(new):
                if k not in body and k not in ("metadata", "status", "apiVersion", "kind"):
                    del new[k]
            if "status" not in res.subresources and "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            meta = copy.deepcopy(body.get("metadata") or {})
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "resourceVersion", "generation", "namespace", "name"):
                meta.pop(k, None)
            kept = {k: v for k, v in new["metadata"].items() if k in ("uid", "creationTimestamp", "deletionTimestamp", "resourceVersion", "generation", "namespace", "name")}
            new["metadata"] = {**kept, **meta}
            if current["metadata"].get("deletionTimestamp"):
                added = set(new["metadata"].get("finalizers") or []) - set(current["metadata"].get("finalizers") or [])
                if added:
                    raise ApiError(422, "Invalid", "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted")
        return self._store(res, current, new)

    def _patch(self, res: Resource, namespace: str, name: str, body: Any, content_type: str, sub: str) -> Obj:
        with self.lock:
            current = self._current(res, namespace, name)
            if "json-patch" in content_type:
                patched = json_patch(current, body)
            else:
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
                meta = body.get("metadata") or {}
                if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
                    raise ApiError(409, "Conflict", f'Precondition failed: UID in precondition: {meta["uid"]}, UID in object meta: {current["metadata"]["uid"]}')
                if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified; please apply your changes to the latest version and try again')
                patched = merge_patch(current, body, strategic="strategic" in content_type)
            patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return self._apply_body(res, current, patched, sub)

    def _bind(self, namespace: str, name: str, body: Obj) -> Obj:
        res = BY_PLURAL["pods"]
        with self.lock:
            pod = self._current(res, namespace, name)
            want_uid = (body.get("metadata") or {}).get("uid")
            if want_uid and want_uid != pod["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {pod['metadata']['uid']}")
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host")
            if (pod.get("spec") or {}).get("nodeName"):
                raise ApiError(409, "Conflict", f"pod {name} is already assigned to node \"{pod['spec']['nodeName']}\"")
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = body["target"]["name"]
            conditions = [c for c in new.setdefault("status", {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
            new["status"]["conditions"] = conditions
            self._store(res, pod, new)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _delete(self, res: Resource, namespace: str, name: str, options: Obj) -> Obj:
        with self.lock:
            current = self._current(res, namespace, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {current['metadata']['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {current['metadata']['resourceVersion']}")
            if current["metadata"].get("finalizers"):
                if current["metadata"].get("deletionTimestamp"):
                    return current
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = _now()
                return self._store(res, current, new)
            self.objects[res.plural].pop((namespace, name), None)
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            self._emit(res, "DELETED", gone)
            self._notify(res, current, None)
            self._collect(current["metadata"]["uid"])
            return gone

    def _collect(self, owner_uid: str) -> None:
        """Background cascading deletion: dependents whose controller was ``owner_uid``."""
        if not self.gc:
            return
        for res in RESOURCES:
            for (ns, n), obj in sorted(self.objects[res.plural].items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    self._delete(res, ns, n, {})

    # --- HTTP -------------------------------------------------------------------------------

    def _route(self, path: str) -> tuple[Resource, str, str, str, str]:
        """(resource, version, namespace, name, subresource) of a request path."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = BY_PLURAL.get(rest[0])
        if res is None or res.group != group or version not in res.versions:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespace and not res.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else ""
        sub = rest[2] if len(rest) >= 3 else ""
        if sub and sub not in res.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return res, version, namespace, name, sub

    def _list_body(self, res: Resource, version: str, namespace: str) -> Obj:
        with self.lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self.objects[res.plural].items()) if not namespace or ns == namespace]
            for item in items:
                item["apiVersion"] = res.api_version(version)
            return {"kind": f"{res.kind}List", "apiVersion": res.api_version(version), "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else {}

            def _send(self, code: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                record = Request(method, url.path, self.headers.get("User-Agent", ""))
                with fake.lock:
                    fake.requests.append(record)
                body: Any = None
                try:
                    if method in ("POST", "PUT", "PATCH", "DELETE"):
                        body = self._body()
                    with fake.lock:
                        for fault in fake.faults:
                            if fault.hits < fault.times and fault.method == method and fault.path.search(url.path):
                                fault.hits += 1
                                reason = fault.reason or {404: "NotFound", 409: "Conflict", 410: "Gone", 500: "InternalError", 429: "TooManyRequests"}.get(fault.code, "Failure")
                                raise ApiError(fault.code, reason, f"injected failure {fault.code}")
                    res, version, namespace, name, sub = fake._route(url.path)
                    query = parse_qs(url.query)
                    if method == "GET" and not name:
                        if query.get("watch", ["false"])[0] in ("true", "1"):
                            record.status = 200
                            record.watch = True
                            self._watch(res, version, namespace or None, query)
                            return
                        code, out = 200, fake._list_body(res, version, namespace)
                    elif method == "GET":
                        code, out = 200, copy.deepcopy(fake._current(res, namespace, name))
                    elif method == "POST" and not name:
                        code, out = 201, copy.deepcopy(fake._create(res, namespace, body))
                    elif method == "POST" and sub == "binding":
                        code, out = 201, fake._bind(namespace, name, body)
                    elif method == "PUT" and name:
                        code, out = 200, copy.deepcopy(fake._update(res, namespace, name, body, sub))
                    elif method == "PATCH" and name:
                        code, out = 200, copy.deepcopy(fake._patch(res, namespace, name, body, self.headers.get("Content-Type", ""), sub))
                    elif method == "DELETE" and name:
                        code, out = 200, copy.deepcopy(fake._delete(res, namespace, name, body or {}))
                    else:
                        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {url.path}")
                    if isinstance(out, dict) and out.get("kind") == res.kind:
                        out["apiVersion"] = res.api_version(version)
                except ApiError as err:
                    code, out = err.code, err.status()
                except (ValueError, KeyError, TypeError, IndexError) as err:
                    code, out = 400, ApiError(400, "BadRequest", f"bad request: {err}").status()
                record.status = code
                self._send(code, out)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

            def _line(self, event: Obj) -> None:
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, res: Resource, version: str, namespace: str | None, query: dict[str, list[str]]) -> None:
                since_text = query.get("resourceVersion", [""])[0]
                timeout = float(query.get("timeoutSeconds", ["1800"])[0])
                watcher = _Watcher(res.plural, namespace)
                backlog: list[Obj] = []
                gone = False
                with fake.lock:
                    if since_text in ("", "0"):
                        for (ns, _), obj in sorted(fake.objects[res.plural].items()):
                            if namespace is None or ns == namespace:
                                backlog.append({"type": "ADDED", "object": copy.deepcopy(obj)})
                    else:
                        since = int(since_text)
                        if since <= fake.compacted:
                            gone = True
                        else:
                            for rv, plural, event in fake.history:
                                if rv > since and plural == res.plural and (namespace is None or event["object"]["metadata"].get("namespace", "") == namespace):
                                    backlog.append(event)
                    if not gone:
                        fake.watchers.append(watcher)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if gone:
                        status = ApiError(410, "Expired", f"too old resource version: {since_text} ({fake.compacted})").status()
                        self._line({"type": "ERROR", "object": status})
                    else:
                        for event in backlog:
                            self._send_event(event, res, version)
                        deadline = time.monotonic() + timeout
                        while True:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                break
                            try:
                                live = watcher.events.get(timeout=min(remaining, 0.5))
                            except queue.Empty:
                                continue
                            if live is None:
                                break
                            self._send_event(live, res, version)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass
                finally:
                    with fake.lock:
                        if watcher in fake.watchers:
                            fake.watchers.remove(watcher)
                self.close_connection = True

            def _send_event(self, event: Obj, res: Resource, version: str) -> None:
                out = {"type": event["type"], "object": copy.deepcopy(event["object"])}
                out["object"]["apiVersion"] = res.api_version(version)
                self._line(out)

        return Handler
