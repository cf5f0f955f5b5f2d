"""Which Kubernetes API requests a package's code makes, as RBAC sees them.

RBAC in `deploy/` must grant every request a component makes and nothing more. Two sources say
what the requests are:

- the code itself: every reference to a kubernetes-client API method (``list_resource_slice``,
  ``create_namespaced_pod_binding``, ...) is resolved through the client to the HTTP method and
  URL path it sends, and from there to RBAC's (apiGroup, resource[/subresource], verb); a
  ``list_*`` method that is streamed through ``watch.Watch`` or called with ``watch=True`` also
  needs ``watch``;
- a list kept next to the code (``controllers/rbac_calls.py`` and the like) for requests that
  the scan cannot see (leader election inside a library, raw ``call_api``).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import kubernetes.client
import kubernetes.client.api


@dataclass(frozen=True, order=True)
class ApiCall:
    """One kind of request: RBAC's apiGroup, resource (with /subresource) and verb."""

    group: str
    resource: str
    verb: str
    namespaced: bool = True

    def __str__(self) -> str:
        group = self.group or "core"
        return f"{self.verb} {group}/{self.resource}"


_SERIALIZE = re.compile(
    r"def _(\w+)_serialize\(.*?method='(\w+)',\s*resource_path='([^']+)'", re.S
)


@cache
def client_methods() -> dict[str, tuple[str, str]]:
    """kubernetes-client method name -> (HTTP method, URL path template), over all API classes.

    Read from the client's generated API modules (each method has a ``_<name>_serialize``
    helper naming its HTTP method and path); CustomObjectsApi is generic and left out.
    """
    api_dir = Path(kubernetes.client.api.__file__).parent
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(api_dir.glob("*_api.py")):
        if path.name == "custom_objects_api.py":
            continue
        for match in _SERIALIZE.finditer(path.read_text(encoding="utf-8")):
            url = match.group(3)
            segments = [p for p in url.split("/") if p]
            # Discovery endpoints (/api/, /apis/group/) are not resource requests.
            if len(segments) < (3 if segments[:1] == ["api"] else 4):
                continue
            out.setdefault(match.group(1), (match.group(2), url))
    return out


def call_for(http_method: str, path: str) -> ApiCall:
    """RBAC's view of one request path, following the API server's request-info rules."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    watch = False
    if rest and rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespaced = False
    if len(rest) >= 2 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        namespaced, rest = True, rest[2:]
    if not rest:  # the namespaces collection itself
        rest = ["namespaces"]
    resource = rest[0]
    has_name = len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    method = http_method.upper()
    if watch:
        verb = "watch"
    elif method in {"GET", "HEAD", "OPTIONS"}:
        verb = "get" if has_name else "list"
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if has_name else "deletecollection"
    else:
        raise ValueError(f"unknown HTTP method {http_method} for {path}")
    return ApiCall(group, resource, verb, namespaced)


def calls_in_source(source: str) -> set[ApiCall]:
    """API calls referenced by one module's source."""
    methods = client_methods()
    tree = ast.parse(source)
    found: set[ApiCall] = set()
    streamed: set[str] = set()
    watched: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            # watch.Watch().stream(api.list_x, ...): the first argument is listed and watched.
            if name == "stream" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Attribute):
                    streamed.add(first.attr)
            if name in methods and any(
                kw.arg == "watch"
                and not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
                for kw in node.keywords
            ):
                watched.add(name)
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # getattr(api, "list_namespaced_pod") and method tables keyed by name.
            name = node.value
        if name in methods:
            http_method, path = methods[name]
            call = call_for(http_method, path)
            found.add(call)
            if name in streamed or name in watched:
                found.add(ApiCall(call.group, call.resource, "watch", call.namespaced))
    return found


def calls_in_package(package_dir: Path) -> dict[ApiCall, list[str]]:
    """API calls referenced anywhere in a package, with the files that reference each."""
    out: dict[ApiCall, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "gen" in path.relative_to(package_dir).parts:
            continue
        for call in calls_in_source(path.read_text(encoding="utf-8")):
            out.setdefault(call, []).append(str(path))
    return out


def declared_calls(module: str) -> set[ApiCall] | None:
    """The list kept next to a component's code, or None if it has none.

    Accepted shapes for the module's ``API_CALLS`` (or ``RBAC_CALLS``): an iterable of
    ``(group, resource, verb)`` tuples, of objects with ``group``/``resource``/``verb``
    attributes (``api_group`` also accepted), or of dicts with those keys; ``verbs`` (plural)
    expands to one call per verb.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and module.startswith(err.name):
            return None
        raise
    table = getattr(mod, "API_CALLS", None)
    if table is None:
        table = getattr(mod, "RBAC_CALLS", None)
    if table is None:
        raise AssertionError(f"{module} has neither API_CALLS nor RBAC_CALLS")
    return set(_normalise(table))


def _normalise(table: Iterable[object]) -> Iterator[ApiCall]:
    for entry in table:
        if isinstance(entry, ApiCall):
            yield entry
            continue
        if isinstance(entry, dict):
            get = entry.get
        elif isinstance(entry, tuple) and not hasattr(entry, "_fields"):
            if len(entry) == 3:
                group, resource, verb = entry
                verbs = [verb] if isinstance(verb, str) else list(verb)
                for v in verbs:
                    yield ApiCall(str(group), str(resource), str(v))
                continue
            raise AssertionError(f"cannot read API call entry {entry!r}")
        else:
            def get(key: str, default: object = None, _e: object = entry) -> object:
                return getattr(_e, key, default)

        group = get("group", get("api_group", get("apiGroup", "")))
        resource = str(get("resource"))
        subresource = get("subresource")
        if subresource:
            resource = f"{resource}/{subresource}"
        verbs = get("verbs") or [get("verb")]
        for verb in verbs:
            yield ApiCall(str(group or ""), resource, str(verb))
