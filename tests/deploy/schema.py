"""Strict checks of manifest objects against the kubernetes client's generated models.

The client's own deserializer ignores unknown keys, so a misspelt field (``readinesProbe``)
would pass silently; this walks the object alongside the model's ``openapi_types`` and
``attribute_map`` and reports every key the API does not have and every value of the wrong
JSON type, with its field path. The client's deserializer then runs as well, which enforces
required fields. Prometheus-operator kinds (ServiceMonitor, PodMonitor, PrometheusRule) and
cert-manager kinds (Issuer, Certificate) have no client model; a small hand-written schema
covers the fields we use.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client
import kubernetes.client.models

# Older clients spell containers list[X] / dict(str, X); newer ones List[X] / Dict[str, X].
_LIST = re.compile(r"^[lL]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\((\w+), (.+)\)|Dict\[(\w+), (.+)\])$")

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "PriorityClass",
    "CustomResourceDefinition",
    "Node",
}


def model_name(obj: dict[str, Any]) -> str:
    """The client model class for an object: apiVersion resource.k8s.io/v1 + DeviceClass ->
    V1DeviceClass."""
    version = str(obj["apiVersion"]).rpartition("/")[2]
    return f"{version[0].upper()}{version[1:]}{obj['kind']}"


def strict_errors(value: Any, type_name: str, path: str = "") -> list[str]:
    """Every mismatch between ``value`` and the client type ``type_name``."""
    errors: list[str] = []
    _check(value, type_name, path or "", errors)
    return errors


def _check(value: Any, type_name: str, path: str, errors: list[str]) -> None:
    if value is None:
        return
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, m.group(1), f"{path}[{i}]", errors)
        return
    if m := _DICT.match(type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map, got {type(value).__name__}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            _check(item, m.group(2) or m.group(4), f"{path}[{key}]", errors)
        return
    if type_name == "object":
        return
    if type_name in {"str", "bytes"}:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {type(value).__name__} {value!r}")
        return
    if type_name == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer, got {value!r}")
        return
    if type_name == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{path}: expected a number, got {value!r}")
        return
    if type_name == "bool":
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean, got {value!r}")
        return
    if type_name in {"datetime", "date"}:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a timestamp string, got {value!r}")
        return
    model = getattr(kubernetes.client.models, type_name, None)
    if model is None:
        errors.append(f"{path}: unknown client type {type_name}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {type_name} object, got {type(value).__name__}")
        return
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    for key, item in value.items():
        attr = by_json.get(key)
        child = f"{path}.{key}" if path else key
        if attr is None:
            errors.append(f"{child}: unknown field (not in {type_name})")
            continue
        _check(item, model.openapi_types[attr], child, errors)


def deserialize(obj: dict[str, Any]) -> Any:
    """The client's own deserializer (raises ValueError on missing required fields)."""
    client: Any = kubernetes.client.ApiClient()
    return client._ApiClient__deserialize(obj, model_name(obj))


# --- prometheus-operator kinds: the subset of monitoring.coreos.com/v1 we use -------------

_ENDPOINT = {
    "port": str,
    "targetPort": (str, int),
    "path": str,
    "scheme": str,
    "interval": str,
    "scrapeTimeout": str,
    "honorLabels": bool,
    "relabelings": list,
    "metricRelabelings": list,
}
OPERATOR_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "jobLabel": str,
        "selector": {"matchLabels": dict, "matchExpressions": list},
        "namespaceSelector": {"matchNames": list, "any": bool},
        "endpoints": [_ENDPOINT],
    },
    "PodMonitor": {
        "jobLabel": str,
        "selector": {"matchLabels": dict, "matchExpressions": list},
        "namespaceSelector": {"matchNames": list, "any": bool},
        "podMetricsEndpoints": [_ENDPOINT],
    },
    "PrometheusRule": {
        "groups": [
            {
                "name": str,
                "interval": str,
                "rules": [
                    {
                        "alert": str,
                        "record": str,
                        "expr": str,
                        "for": str,
                        "labels": dict,
                        "annotations": dict,
                    }
                ],
            }
        ],
    },
}


# --- cert-manager kinds: the subset of cert-manager.io/v1 we use --------------------------

_ISSUER_REF = {"group": str, "kind": str, "name": str}
CERT_MANAGER_SCHEMAS: dict[str, dict[str, Any]] = {
    "Issuer": {"selfSigned": {"crlDistributionPoints": list}, "ca": {"secretName": str}},
    "Certificate": {
        "secretName": str,
        "commonName": str,
        "dnsNames": [str],
        "isCA": bool,
        "duration": str,
        "renewBefore": str,
        "usages": [str],
        "privateKey": {"algorithm": str, "size": int, "encoding": str, "rotationPolicy": str},
        "issuerRef": _ISSUER_REF,
    },
}
CERT_MANAGER_USAGES = {
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
}


def cert_manager_errors(obj: dict[str, Any]) -> list[str]:
    """Mismatches of a cert-manager object against CERT_MANAGER_SCHEMAS (and its enums)."""
    errors = _crd_errors(obj, "cert-manager.io/v1", CERT_MANAGER_SCHEMAS)
    spec = obj.get("spec") or {}
    for usage in spec.get("usages", []) if isinstance(spec, dict) else []:
        if usage not in CERT_MANAGER_USAGES:
            errors.append(f"spec.usages: unsupported value {usage!r}")
    key = spec.get("privateKey", {}) if isinstance(spec, dict) else {}
    if isinstance(key, dict):
        if key.get("algorithm", "RSA") not in {"RSA", "ECDSA", "Ed25519"}:
            errors.append(f"spec.privateKey.algorithm: unsupported value {key['algorithm']!r}")
        if key.get("rotationPolicy", "Always") not in {"Never", "Always"}:
            errors.append(f"spec.privateKey.rotationPolicy: unsupported {key['rotationPolicy']!r}")
    return errors


def operator_errors(obj: dict[str, Any]) -> list[str]:
    """Mismatches of a prometheus-operator object against OPERATOR_SCHEMAS."""
    return _crd_errors(obj, "monitoring.coreos.com/v1", OPERATOR_SCHEMAS)


def _crd_errors(obj: dict[str, Any], api_version: str, schemas: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    if obj.get("apiVersion") != api_version:
        errors.append(f"apiVersion {obj.get('apiVersion')!r} is not {api_version}")
    schema = schemas.get(obj.get("kind", ""))
    if schema is None:
        return [*errors, f"no schema for kind {obj.get('kind')!r}"]
    extra = set(obj) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        errors.append(f"unknown top-level fields {sorted(extra)}")
    errors.extend(strict_errors(obj.get("metadata", {}), "V1ObjectMeta", "metadata"))
    _check_shape(obj.get("spec"), schema, "spec", errors)
    return errors


def _check_shape(value: Any, shape: Any, path: str, errors: list[str]) -> None:
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        for key, item in value.items():
            if key not in shape:
                errors.append(f"{path}.{key}: unknown field")
            else:
                _check_shape(item, shape[key], f"{path}.{key}", errors)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _check_shape(item, shape[0], f"{path}[{i}]", errors)
    elif not isinstance(value, shape):
        errors.append(f"{path}: unexpected type {type(value).__name__}")
