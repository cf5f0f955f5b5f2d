"""The only module that talks to the Kubernetes API: a thin layer over the ``kubernetes`` client.

Every call goes through the client's typed API classes (``CoreV1Api``, ``ResourceV1Api``,
``CoordinationV1Api``): reads with ``_preload_content=False``, writes through each typed
method's own request builder, so objects stay the API's JSON both ways (no lossy round trip
through the client's models, which refuse fields they do not know). Writes are then sent over
connections of our own (:mod:`.direct`: the client's urllib3 path cost as much Python as the
rest of a write) and every answer and watch event is decoded with orjson. Failures become one small hierarchy
every component branches on: :class:`NotFound`, :class:`Conflict` (stale resourceVersion, failed
precondition, name taken), :class:`Gone` (watch too old), :class:`Transient` (retry later,
with the server's Retry-After when it gave one) and :class:`Invalid` (retrying will not help).

:func:`api_client` builds the client every command uses and checks, before anything starts,
that the server answers and accepts the credentials: a missing or unreadable kubeconfig, a
server nobody can reach or ``--in-cluster`` outside a cluster is one :class:`ConfigError`
with one line of text, which the commands print before exiting with status 2.

Components keep their own requests next to their code (the kubelet plugin's slice writes in
``kubeletplugin/publish.py``, the service's list+watch sources in ``service/inventory.py``)
and send them through :meth:`Kube.read` and :meth:`Kube.write` or an :class:`Informer
<service.kubeapi.informer.Informer>`, so each request is attributed to the component that
makes it; ``controllers/rbac_calls.py`` and ``service/rbac_calls.py`` list those requests as RBAC
sees them; whether deploy/ grants what each component really sends is checked on a real API
server, from its audit log (tests/deploy/test_rbac_as_shipped.py).
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_solver.service.kubeapi.direct import Reply, Transport, dumps, loads
from dra_solver.service.kubeapi.meta import Obj

log = logging.getLogger(__name__)


def k8s() -> Any:
    """The ``kubernetes`` client package (untyped), imported on first use: a file-backed
    ``dra-solver serve`` and the one-shot commands never talk to an API server, and should not
    pay for it (about 0.3 s and 30 MiB)."""
    # lazy import: the kubernetes client (~0.3 s, ~30 MiB), only for processes that use an API server
    import kubernetes.client
    import kubernetes.config
    import kubernetes.watch

    return kubernetes


@functools.cache
def _json_watch_class() -> type:
    base = k8s().watch.Watch

    class JsonWatch(base):  # type: ignore[misc, valid-type]
        def unmarshal_event(self, data: str, return_type: Any) -> Obj | None:
            if not data or data.isspace():
                return None
            try:
                event: Obj = loads(data)
            except ValueError:
                return None
            obj = event.get("object")
            event["raw_object"] = obj
            if event.get("type") != "ERROR" and isinstance(obj, dict):
                # Where the client resumes from, as its own decoder records it.
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
            return event

    return JsonWatch


def json_watch() -> Any:
    """A ``kubernetes.watch.Watch`` whose events carry the API's JSON, decoded once.

    The client's own decodes each event, encodes the object again and decodes that once more
    to build a model, which even ``return_type="object"`` does not skip: a share of every
    watch-heavy process's time (the controllers, ``serve`` on an API server). A return type is
    still given: the client would otherwise guess a model class from the list method's
    annotation (which fails for some), though no model is built here."""
    return _json_watch_class()(return_type="object")


STRATEGIC_MERGE = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
"""Server-side apply: each field manager owns the fields it sets; others' are kept."""
REQUEST_TIMEOUT = (10.0, 60.0)
"""(connect, read) seconds for every call but watches."""


class ApiError(Exception):
    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: stale resourceVersion, failed UID precondition, or the name already exists."""


class Gone(ApiError):
    """410: the resourceVersion is too old to watch from; list again."""


class Invalid(ApiError):
    """400/403/422 and the like: the request itself is wrong; retrying the same will not help."""


class ConfigError(Exception):
    """The client cannot be set up: no usable kubeconfig, not in a cluster, server unreachable
    or refusing the credentials. The message is one line, fit for a CLI's error output."""


class Unreachable(ConfigError):
    """The API server did not answer (connection refused, timed out, TLS failed): not the
    caller's input, so a one-shot command exits as for an unreachable service (4), not 2."""


class Transient(ApiError):
    """429, 5xx, timeouts, connection errors: retry after ``delay`` (0 = the caller's backoff)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", delay: float = 0.0) -> None:
        super().__init__(message, status=status, reason=reason)
        self.delay = delay


def wrap(err: BaseException, what: str) -> ApiError:
    """Map a client exception to our hierarchy; ``what`` names the request ("update claim ns/x")."""
    if isinstance(err, ApiError):
        return err
    if isinstance(err, k8s().client.exceptions.ApiException):
        headers = getattr(err, "headers", None) or {}
        return status_error(what, int(err.status or 0), err.reason, getattr(err, "body", None), headers.get("Retry-After"))
    if isinstance(err, ValueError | TypeError):  # a body the client refuses to send
        return Invalid(f"{what}: {err}")
    return Transient(f"{what}: {type(err).__name__}: {err}")


def status_error(what: str, status: int, phrase: str | None, body: Any, retry_after: Any) -> ApiError:
    """The error for an answer with HTTP ``status``, told by the Status object in its ``body``."""
    message, reason = _status_text(body)
    text = f"{what}: {message or phrase or status}"
    if status == 404:
        return NotFound(text, status=status, reason=reason)
    if status == 409:
        return Conflict(text, status=status, reason=reason)
    if status == 410:
        return Gone(text, status=status, reason=reason)
    if status == 429 or status >= 500 or status == 0:
        try:
            delay = float(retry_after or 0)
        except (TypeError, ValueError):
            delay = 0.0
        return Transient(text, status=status, reason=reason, delay=delay)
    return Invalid(text, status=status, reason=reason)


def _status_text(body: Any) -> tuple[str, str]:
    if not body:
        return "", ""
    try:
        doc = loads(body)
    except (TypeError, ValueError):
        return str(body)[:200], ""
    if isinstance(doc, dict):
        return str(doc.get("message") or ""), str(doc.get("reason") or "")
    return "", ""


def _json(resp: Any) -> Obj:
    data = resp.data if hasattr(resp, "data") else resp
    if not data:
        return {}
    doc = loads(data)
    return doc if isinstance(doc, dict) else {}


@dataclass(frozen=True, slots=True)
class ListSource:
    """One list+watch endpoint: a typed ``list_*`` method of the client."""

    name: str
    kind: str
    api_version: str
    list_fn: Callable[..., Any]
    optional: bool = False
    """404 means "not served here" (alpha APIs): an empty list, not an error."""



_PARAMETERS: dict[tuple[type, str], tuple[str, ...]] = {}


def _parameters(api: Any, method: str) -> tuple[str, ...]:
    """The parameter names of a typed client's request builder, read once per class and method
    (a signature per write was a measurable share of a write's Python time)."""
    key = (type(api), method)
    names = _PARAMETERS.get(key)
    if names is None:
        names = _PARAMETERS[key] = tuple(inspect.signature(getattr(api, f"_{method}_serialize")).parameters)
    return names

def transport_for(cfg: Any) -> Transport | None:
    """The writes' own connections for a client configuration (:mod:`.direct`), or None."""
    proxied = bool(cfg.proxy) and not k8s().client.rest.should_bypass_proxies(cfg.host, cfg.no_proxy or "")
    return Transport.for_config(cfg, timeout=REQUEST_TIMEOUT, proxied=proxied)


class Kube:
    """The requests the controllers make, each returning the API's JSON."""

    def __init__(self, api_client: Any, *, taint_rule_version: str = "v1") -> None:
        client = k8s().client
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.scheduling = client.SchedulingV1beta1Api(api_client)
        rules_api = {
            "v1": client.ResourceV1Api,
            "v1beta2": client.ResourceV1beta2Api,
            "v1alpha3": client.ResourceV1alpha3Api,
        }.get(taint_rule_version)
        if rules_api is None:
            raise ValueError(f"unsupported DeviceTaintRule version {taint_rule_version!r}: use v1, v1beta2 or v1alpha3")
        self.taint_rule_version = taint_rule_version
        self.rules: Any = rules_api(api_client)
        self.transport = transport_for(api_client.configuration)
        """Where writes go, or None for urllib3's (a configuration it alone reproduces)."""

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """A read through a typed method (nothing to validate on the way out)."""
        try:
            return _json(fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs))
        except Exception as err:
            raise wrap(err, what) from err

    def _write(self, what: str, api: Any, method: str, **params: Any) -> Obj:
        """A write through the typed method's own request builder, body sent as given.

        The typed methods validate bodies against the client's models, which forbid fields
        they do not know: a claim from a newer API server (or an allocation result with a
        newer field) could then never be written back. The request builder still supplies the
        path, query, headers and authentication of ``method``.
        """
        serialize = getattr(api, f"_{method}_serialize")
        # The builder would walk the body to "sanitize" it for JSON, in Python, on every write:
        # our bodies are JSON already, and the REST layer encodes them as given.
        args = {name: None if name == "body" else params.get(name) for name in _parameters(api, method)}
        args["_host_index"] = 0
        body = params.get("body")
        try:
            verb, url, headers, _, post_params = serialize(**args)
            if self.transport is None or post_params:
                resp = self.api_client.call_api(verb, url, headers, body, post_params, _request_timeout=REQUEST_TIMEOUT)
                reply = Reply(resp.status, resp.reason, resp.read(), resp.getheader("Retry-After"))
            else:
                data = None
                if body is not None:
                    data = dumps(body)
                    headers.setdefault("Content-Type", "application/json")
                reply = self.transport.request(verb, url, headers, data)
            if 200 <= reply.status <= 299:
                return _json(reply.data)  # an answer that is not JSON: Invalid, whichever way it came
        except Exception as err:
            raise wrap(err, what) from err
        raise status_error(what, reply.status, reply.reason, reply.data, reply.retry_after)

    def read(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """A GET through a typed method of :attr:`core`, :attr:`resource`, ... (its JSON)."""
        return self._call(what, fn, *args, **kwargs)

    def write(self, what: str, api: Any, method: str, **params: Any) -> Obj:
        """A create/update/patch/delete by typed method name, the body sent as given."""
        return self._write(what, api, method, **params)

    # --- list+watch sources -----------------------------------------------------------------

    def pods(self) -> ListSource:
        return ListSource("pods", "Pod", "v1", self.core.list_pod_for_all_namespaces)

    def nodes(self) -> ListSource:
        return ListSource("nodes", "Node", "v1", self.core.list_node)

    def claims(self) -> ListSource:
        return ListSource("resourceclaims", "ResourceClaim", "resource.k8s.io/v1", self.resource.list_resource_claim_for_all_namespaces)

    def templates(self) -> ListSource:
        return ListSource(
            "resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io/v1", self.resource.list_resource_claim_template_for_all_namespaces
        )

    def device_classes(self) -> ListSource:
        return ListSource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", self.resource.list_device_class)

    def slices(self) -> ListSource:
        return ListSource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", self.resource.list_resource_slice)

    def taint_rules(self) -> ListSource:
        return ListSource(
            "devicetaintrules", "DeviceTaintRule", f"resource.k8s.io/{self.taint_rule_version}", self.rules.list_device_taint_rule, optional=True
        )

    def pod_groups(self) -> ListSource:
        """scheduling.k8s.io/v1beta1 PodGroups (an off-by-default beta: not served = empty)."""
        return ListSource("podgroups", "PodGroup", "scheduling.k8s.io/v1beta1", self.scheduling.list_pod_group_for_all_namespaces, optional=True)

    def get_pod_group(self, namespace: str, name: str) -> Obj:
        return self._call(f"get podgroup {namespace}/{name}", self.scheduling.read_namespaced_pod_group, name, namespace)

    # --- pods ---------------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._call(f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Strategic-merge patch of the status subresource (lists merge by their keys)."""
        return self._write(
            f"patch pod {namespace}/{name} status", self.core, "patch_namespaced_pod_status",
            name=name, namespace=namespace, body=patch, _content_type=STRATEGIC_MERGE,
        )

    def bind_pod(self, namespace: str, name: str, binding: Obj) -> Obj:
        return self._write(f"bind pod {namespace}/{name}", self.core, "create_namespaced_pod_binding", name=name, namespace=namespace, body=binding)

    def delete_pod(self, namespace: str, name: str, *, uid: str) -> Obj:
        """Delete only this instance: a pod re-created under the same name is left alone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._write(f"delete pod {namespace}/{name}", self.core, "delete_namespaced_pod", name=name, namespace=namespace, body=body)

    def create_event(self, namespace: str, event: Obj) -> Obj:
        return self._write(f"create event in {namespace}", self.core, "create_namespaced_event", namespace=namespace, body=event)

    # --- claims -------------------------------------------------------------------------------

    def create_claim(self, namespace: str, claim: Obj) -> Obj:
        return self._write(f"create claim in {namespace}", self.resource, "create_namespaced_resource_claim", namespace=namespace, body=claim)

    def get_claim(self, namespace: str, name: str) -> Obj:
        return self._call(f"get claim {namespace}/{name}", self.resource.read_namespaced_resource_claim, name, namespace)

    def update_claim(self, claim: Obj) -> Obj:
        """Metadata/spec update; its resourceVersion is the precondition (409 when stale)."""
        meta = claim["metadata"]
        return self._write(
            f"update claim {meta['namespace']}/{meta['name']}", self.resource, "replace_namespaced_resource_claim",
            name=meta["name"], namespace=meta["namespace"], body=claim,
        )

    def update_claim_status(self, claim: Obj) -> Obj:
        """Status update; its resourceVersion is the precondition (409 when stale)."""
        meta = claim["metadata"]
        return self._write(
            f"update claim {meta['namespace']}/{meta['name']} status", self.resource, "replace_namespaced_resource_claim_status",
            name=meta["name"], namespace=meta["namespace"], body=claim,
        )

    def apply_claim_status(self, namespace: str, name: str, body: Obj, *, field_manager: str) -> Obj:
        """Server-side apply of a claim's status as ``field_manager`` (forced: the fields we
        apply are ours); entries other managers own, such as other drivers' devices, stay."""
        return self._write(
            f"apply claim {namespace}/{name} status", self.resource, "patch_namespaced_resource_claim_status",
            name=name, namespace=namespace, body=body, field_manager=field_manager, force=True, _content_type=APPLY_PATCH,
        )

    def delete_claim(self, namespace: str, name: str, *, uid: str) -> Obj:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._write(f"delete claim {namespace}/{name}", self.resource, "delete_namespaced_resource_claim", name=name, namespace=namespace, body=body)

    # --- pod groups ---------------------------------------------------------------------------

    def patch_pod_group_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """JSON merge patch of a PodGroup's status subresource (conditions are replaced whole;
        a ``metadata.resourceVersion`` in the patch is the precondition)."""
        return self._write(
            f"patch podgroup {namespace}/{name} status", self.scheduling, "patch_namespaced_pod_group_status",
            name=name, namespace=namespace, body=patch, _content_type=MERGE_PATCH,
        )

    # --- device taint rules ---------------------------------------------------------------------

    def apply_taint_rule_status(self, name: str, body: Obj, *, field_manager: str) -> Obj:
        """Server-side apply of a DeviceTaintRule's status (at ``taint_rule_version``)."""
        return self._write(
            f"apply devicetaintrule {name} status", self.rules, "patch_device_taint_rule_status",
            name=name, body=body, field_manager=field_manager, force=True, _content_type=APPLY_PATCH,
        )

    # --- leases -------------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj:
        return self._call(f"get lease {namespace}/{name}", self.coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        return self._write(f"create lease in {namespace}", self.coordination, "create_namespaced_lease", namespace=namespace, body=lease)

    def update_lease(self, lease: Obj) -> Obj:
        meta = lease["metadata"]
        return self._write(
            f"update lease {meta['namespace']}/{meta['name']}", self.coordination, "replace_namespaced_lease",
            name=meta["name"], namespace=meta["namespace"], body=lease,
        )


PROBE_TIMEOUT = 10.0
"""Seconds :func:`api_client` waits for a server that answers 429/5xx before giving up."""


def api_client(
    *,
    kubeconfig: str | None = None,
    in_cluster: bool = False,
    host: str | None = None,
    user_agent: str = "dra-solver-controllers",
    probe: bool = True,
    connections: int = 96,
) -> Any:
    """A configured ``kubernetes.client.ApiClient``, checked to reach the server.

    ``kubeconfig`` None means ``$KUBECONFIG`` or ``~/.kube/config``, as kubectl. Raises
    :class:`ConfigError` (one line) when the configuration cannot be loaded or, with ``probe``,
    when the server cannot be reached or rejects the credentials (the probe is a discovery
    request every authenticated user may make). ``host`` alone: plain HTTP without credentials
    or probe, for tests.
    """
    client = k8s().client
    cfg = client.Configuration()
    if host is not None:
        cfg.host = host
        probe = False
    elif in_cluster:
        _load_in_cluster(cfg)
    else:
        _load_kubeconfig(cfg, kubeconfig)
    # Connections per host (``connections``): informers hold one each for their watches,
    # workers need the rest; a pool smaller than that discards connections and handshakes again.
    cfg.connection_pool_maxsize = connections
    api = client.ApiClient(cfg)
    api.user_agent = user_agent
    if probe:
        _probe(api, cfg.host, "--in-cluster" if in_cluster else f"kubeconfig {_kubeconfig_path(kubeconfig)}")
    return api


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _kubeconfig_path(kubeconfig: str | None) -> str:
    if kubeconfig:
        return kubeconfig
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p]
    return paths[0] if len(paths) == 1 else (env if paths else os.path.expanduser("~/.kube/config"))


def _load_kubeconfig(cfg: Any, kubeconfig: str | None) -> None:
    config = k8s().config
    path = _kubeconfig_path(kubeconfig)
    if os.pathsep not in path:  # a single file: say precisely what is wrong with it
        try:
            with open(path, "rb") as f:
                f.read(1)
        except FileNotFoundError:
            hint = "" if kubeconfig else " (give --kubeconfig FILE or set KUBECONFIG)"
            raise ConfigError(f"kubeconfig {path}: no such file{hint}") from None
        except OSError as err:
            raise ConfigError(f"kubeconfig {path}: cannot read: {err.strerror or _one_line(err)}") from None
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except Exception as err:  # ConfigException, YAML errors, bad certificates: all one story
        raise ConfigError(f"kubeconfig {path}: {_one_line(err)}") from None


def _load_in_cluster(cfg: Any) -> None:
    config = k8s().config
    if not (os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")):
        raise ConfigError(
            "--in-cluster: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set); "
            "give --kubeconfig FILE instead"
        )
    try:
        config.load_incluster_config(client_configuration=cfg)
    except Exception as err:  # the service-account token or CA file is missing
        raise ConfigError(f"--in-cluster: {_one_line(err)}") from None


def _probe(api: Any, host: str, origin: str) -> None:
    """Ask for resource.k8s.io/v1 discovery: reachable, credentials accepted, DRA served."""
    # Its own client without urllib3's retries: one attempt, no "Retrying ..." warnings.
    cfg = copy.deepcopy(api.configuration)
    cfg.retries = False
    deadline = time.monotonic() + PROBE_TIMEOUT
    with k8s().client.ApiClient(cfg) as probe:
        while True:
            err = _probe_once(probe)
            if err is None:
                return
            cause, wrapped = err
            if wrapped.status == 401:
                raise ConfigError(f"the Kubernetes API server at {host} rejected the credentials from {origin} (401 Unauthorized)")
            if wrapped.status == 403:
                return  # authenticated; whether each request is allowed is RBAC's business
            if wrapped.status == 404:
                # Reachable and answering; the requests that need the API will say what is missing.
                log.warning("the Kubernetes API server at %s does not serve resource.k8s.io/v1 (dynamic resource allocation)", host)
                return
            if isinstance(wrapped, Transient) and wrapped.status and time.monotonic() < deadline:
                time.sleep(0.5)  # answering, but not ready (starting up, overloaded)
                continue
            raise Unreachable(f"cannot reach the Kubernetes API server at {host} (from {origin}): {_reason(cause)}")


def _probe_once(api: Any) -> tuple[BaseException, ApiError] | None:
    try:
        k8s().client.ResourceV1Api(api).get_api_resources(_preload_content=False, _request_timeout=(5.0, 10.0))
        return None
    except Exception as exc:
        return exc, wrap(exc, "discovery")


def _reason(err: BaseException) -> str:
    # urllib3 wraps the cause twice (MaxRetryError -> NewConnectionError/SSLError): say the cause.
    reason = getattr(err, "reason", None)
    if isinstance(reason, BaseException):
        inner = getattr(reason, "reason", None)
        text = _one_line(inner if isinstance(inner, BaseException) else reason)
    else:
        text = _one_line(err)
    # "HTTPSConnection(host='127.0.0.1', port=9): Failed to ...": the host is said already.
    if text.startswith(("HTTPSConnection(", "HTTPConnection(")) and "): " in text:
        text = text.split("): ", 1)[1]
    elif text.startswith("<urllib3.") and ">: " in text:
        text = text.split(">: ", 1)[1]
    return text
