"""Where prepare reads a claim's allocation: the Kubernetes API, or a directory of files.

The kubelet's request names a claim by namespace, name and UID only; the allocation itself
(``status.allocation``) has to be read. Upstream's helper reads it from the API server; the
directory source reads ``ResourceClaim`` objects from YAML/JSON files (any file names, multi-
document YAML, ``List`` kinds) so the plugin runs end to end without an API server: the
solver service writes allocated claims there and the plugin prepares them.

Both sources apply the same checks as upstream's helper: the claim must exist, carry the UID
the kubelet asked for (otherwise it was deleted and recreated under the same name) and be
allocated. Errors read like upstream's (``retrieve claim ns/name: ...``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from dra_solver.model import InvalidInput, decode_object, parse_documents
from dra_solver.model import objects as o
from dra_solver.service.api import kube

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")


class ClaimLookupError(Exception):
    """The claim cannot be prepared as asked; the message becomes the claim's error."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str, uid: str) -> o.ResourceClaim:
        """The claim, checked to have ``uid`` and an allocation; else ClaimLookupError."""
        ...


def check_claim(claim: o.ResourceClaim, *, namespace: str, name: str, uid: str) -> o.ResourceClaim:
    if (claim.metadata.uid or "") != uid:
        raise ClaimLookupError(
            f"claim {namespace}/{name} got replaced (UID {claim.metadata.uid}, expected {uid})"
        )
    if not claim.allocated:
        raise ClaimLookupError(f"claim {namespace}/{name} not allocated")
    return claim


def _decode_claim(
    doc: dict[str, Any], *, source: str, namespace: str, name: str
) -> o.ResourceClaim:
    try:
        # An allocated claim the API server (or the scheduler writing the directory) already
        # accepted: read it as `--validate=ignore`, so a newer server's fields never fail it.
        obj = decode_object(doc, source=source, validate="ignore")
    except InvalidInput as err:
        raise ClaimLookupError(f"retrieve claim {namespace}/{name}: {err}") from None
    if not isinstance(obj, o.ResourceClaim):
        raise ClaimLookupError(f"retrieve claim {namespace}/{name}: {source}: not a ResourceClaim")
    return obj


class DirectoryClaimSource:
    """ResourceClaims from ``*.yaml|*.yml|*.json`` under a directory, re-read on every lookup.

    Re-reading keeps the source trivially correct while another process writes allocations
    into the directory; the files are small and prepare is rare.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, namespace: str, name: str, uid: str) -> o.ResourceClaim:
        candidates: list[tuple[str, dict[str, Any]]] = []
        for path in self._files():
            try:
                docs = parse_documents(path.read_text(encoding="utf-8"), source=str(path))
            except (OSError, UnicodeDecodeError, InvalidInput) as err:
                log.warning("claim source: skipping %s: %s", path, err)
                continue
            for doc in docs:
                meta = doc.get("metadata") or {}
                if (
                    doc.get("kind") == "ResourceClaim"
                    and isinstance(meta, dict)
                    and meta.get("name") == name
                    and (meta.get("namespace") or "default") == namespace
                ):
                    candidates.append((str(path), doc))
        if not candidates:
            raise ClaimLookupError(
                f"retrieve claim {namespace}/{name}: not found in {self.directory}"
            )
        # Prefer the document with the requested UID when stale copies exist side by side.
        source, doc = next(
            ((s, d) for s, d in candidates if (d.get("metadata") or {}).get("uid") == uid),
            candidates[-1],
        )
        claim = _decode_claim(doc, source=source, namespace=namespace, name=name)
        if claim.metadata.namespace is None:
            claim.metadata.namespace = namespace
        return check_claim(claim, namespace=namespace, name=name, uid=uid)

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return [
            p
            for p in sorted(self.directory.rglob("*"))
            if p.is_file() and p.suffix in SUFFIXES and not p.name.startswith(".")
        ]


class KubeClaimSource:
    """``GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}`` through the shared
    client layer (``service.kubeapi``).

    The response stays raw JSON and is decoded by ``model``, so fields the generated client
    models do not know yet survive.
    """

    def __init__(self, api_client: Any) -> None:
        self._kube = kube.Kube(api_client)

    def get(self, namespace: str, name: str, uid: str) -> o.ResourceClaim:
        what = f"retrieve claim {namespace}/{name}"
        try:
            doc = self._kube.read(
                what, self._kube.resource.read_namespaced_resource_claim, name, namespace
            )
        except kube.NotFound:
            raise ClaimLookupError(f"{what}: not found") from None
        except kube.ApiError as err:
            raise ClaimLookupError(str(err)) from None
        if not doc:
            raise ClaimLookupError(f"{what}: unexpected response")
        doc.setdefault("kind", "ResourceClaim")
        doc.setdefault("apiVersion", "resource.k8s.io/v1")
        claim = _decode_claim(doc, source="API", namespace=namespace, name=name)
        return check_claim(claim, namespace=namespace, name=name, uid=uid)
