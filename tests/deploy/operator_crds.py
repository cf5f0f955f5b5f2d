"""CustomResourceDefinitions of our own for the third-party kinds deploy/ uses.

deploy/monitoring holds prometheus-operator objects (ServiceMonitor, PodMonitor,
PrometheusRule) and deploy/components/cert-manager cert-manager's (Issuer, Certificate). Their
projects' CRDs are not packages any registry we use ships, and we do not copy other projects'
files into ours. These CRDs are generated from ``schema.OPERATOR_SCHEMAS`` and
``schema.CERT_MANAGER_SCHEMAS`` (the subsets of monitoring.coreos.com/v1 and cert-manager.io/v1
this repository uses, written from those projects' API documentation) as structural schemas,
so that ``kubectl apply --dry-run=server --validate=strict`` checks on the real API server: the
group, version, kind and scope of each object, its metadata (names, namespaces, labels), and
the field names and types it uses, against our reading of those APIs. They do not check what
only the real CRDs know: enums, patterns, required fields, defaults, CEL rules, and fields we
do not use.
"""

from __future__ import annotations

from typing import Any

from tests.deploy.schema import CERT_MANAGER_SCHEMAS, OPERATOR_SCHEMAS

GROUPS: dict[str, dict[str, dict[str, Any]]] = {
    "monitoring.coreos.com": OPERATOR_SCHEMAS,
    "cert-manager.io": CERT_MANAGER_SCHEMAS,
}
PLURALS = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules",
           "Issuer": "issuers", "Certificate": "certificates"}


def _schema(shape: Any) -> dict[str, Any]:
    if isinstance(shape, dict):
        return {"type": "object", "properties": {k: _schema(v) for k, v in shape.items()}}
    if isinstance(shape, list):
        return {"type": "array", "items": _schema(shape[0])}
    if isinstance(shape, tuple):  # str or int: Kubernetes' IntOrString
        return {"x-kubernetes-int-or-string": True}
    if shape is dict:  # a free-form map (labels, matchLabels)
        return {"type": "object", "additionalProperties": {"type": "string"}}
    if shape is list:  # a list we do not describe further (matchNames, relabelings)
        return {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}
    return {"type": {str: "string", bool: "boolean", int: "integer"}[shape]}


def crds() -> list[dict[str, Any]]:
    out = []
    for group, schemas in sorted(GROUPS.items()):
        out.extend(_crd(group, kind, spec) for kind, spec in sorted(schemas.items()))
    return out


def _crd(group: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    plural = PLURALS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, "spec": _schema(spec)},
                }},
            }],
        },
    }
