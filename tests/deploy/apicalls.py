"""Kubernetes API requests as RBAC sees them: (apiGroup, resource[/subresource], verb).

``call_for`` follows the API server's request-info rules from an HTTP method and URL path;
``client_methods`` maps every kubernetes-client API method to the request it sends, which tells
which resources are namespaced. What each component really asks for is read from the real API
server's audit log (tests/deploy/test_rbac_as_shipped.py).
"""

from __future__ import annotations

import re
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
