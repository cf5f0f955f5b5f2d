"""Metadata of Kubernetes objects in their JSON form (plain dicts, as the API server sends them).

Shared by every component that talks to the API (service inventory, controllers, kubelet
plugin): keys for caches and work queues, resourceVersion ordering, deletion state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
"""One API object as decoded JSON."""


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    if type(m) is dict:  # what decoded JSON holds; the ABC check costs more than the rest
        return m
    return m if isinstance(m, Mapping) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid") or "")


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects): work-queue and cache key."""
    ns = namespace(obj)
    return f"{ns}/{name(obj)}" if ns else name(obj)


def split_key(k: str) -> tuple[str, str]:
    ns, _, n = k.rpartition("/")
    return ns, n


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    return [str(f) for f in meta(obj).get("finalizers") or []]


def rv_int(obj: Mapping[str, Any] | None) -> int:
    """The resourceVersion as a number for "which copy is newer" (0 when absent or opaque)."""
    if obj is None:
        return 0
    try:
        return int(resource_version(obj))
    except ValueError:
        return 0


# --- time ---------------------------------------------------------------------------------------
