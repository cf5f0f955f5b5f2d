"""Manifests and code agree: commands, flags, ports, paths, names.

Every container's ``args`` are parsed by the real ``dra-solver`` argument parser (so a flag the
code does not have, or a misspelt one, fails here rather than in a CrashLoopBackOff), and the
parsed values are compared with the container ports, probes, Service, ServiceMonitor, volume
mounts and the addresses other components use.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest
import yaml

from dra_solver import cli
from tests.deploy.manifests import DEPLOY, OVERLAYS, find, overlay

VENV = re.search(
    r"python -m venv (\S+)", (DEPLOY.parent / "Dockerfile").read_text(encoding="utf-8")
).group(1)  # type: ignore[union-attr]
"""Where the image installs dra-solver (and its python)."""

KUBELET_PATHS = {
    "/var/lib/kubelet/plugins",
    "/var/lib/kubelet/plugins_registry",
    "/var/run/cdi",
}


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _expand(arg: str, env: dict[str, str]) -> str:
    # The kubelet expands $(VAR) from the container's env before exec.
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def parse_args(obj: dict[str, Any]) -> argparse.Namespace:
    container = _container(obj)
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[var["name"]] = var.get("value", f"<{source}>")
    assert not container.get("command"), "the image's entry point is dra-solver"
    args = [_expand(a, env) for a in container["args"]]
    assert "$(" not in " ".join(args), f"unexpanded variable in {args}"
    assert args[0] in cli.SUBCOMMANDS, f"{args[0]} is not a dra-solver subcommand"
    parser = cli.build_parser(args)
    try:
        return parser.parse_args(args)
    except SystemExit as err:  # argparse reports on stderr; say which manifest
        raise AssertionError(f"{obj['metadata']['name']}: dra-solver rejects {args}") from err


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def parse_probe(probe: dict[str, Any]) -> argparse.Namespace:
    """The solver's exec readiness probe, parsed by the real healthcheck parser."""
    from dra_solver.service import healthcheck

    command = probe["exec"]["command"]
    assert command[:3] == [f"{VENV}/bin/python", "-m", "dra_solver.service.healthcheck"], command
    try:
        return healthcheck.build_parser().parse_args(command[3:])
    except SystemExit as err:
        raise AssertionError(f"service.healthcheck rejects {command[3:]}") from err


def secret_file(obj: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file at ``path`` in the workload's only container."""
    container = _container(obj)
    volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
    for mount in container.get("volumeMounts", []):
        directory = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(directory):
            continue
        secret = volumes[mount["name"]].get("secret")
        assert secret is not None, f"{path} is not on a Secret volume"
        assert mount.get("readOnly") is True, f"{mount['mountPath']} must be read-only"
        relative = path[len(directory) :]
        items = {i["path"]: i["key"] for i in secret.get("items", [])}
        if items:
            assert relative in items, f"{path}: the Secret volume does not project it"
        return secret["secretName"], items.get(relative, relative)
    raise AssertionError(f"{path} is not on any mounted volume")


@pytest.mark.parametrize("name", OVERLAYS)
def test_solver_flags_ports_probes_and_service_agree(name: str) -> None:
    objects = overlay(name)
    deployment = find(objects, "Deployment", "dra-solver")
    args = parse_args(deployment)
    assert args.command == "serve"
    container = _container(deployment)
    ports = _ports(container)
    assert args.port == ports["grpc"]
    assert args.metrics_port == ports["metrics"]
    assert args.address == "0.0.0.0", "reachable from other pods"
    probe = parse_probe(container["readinessProbe"])
    host, _, port = probe.address.rpartition(":")
    assert (host, int(port)) == ("127.0.0.1", ports["grpc"]), "the probe asks this container"
    for probe in ("livenessProbe", "startupProbe"):
        http = container[probe]["httpGet"]
        assert http["port"] in ports or http["port"] in ports.values()
        assert http["path"] == "/healthz", "/metrics answers scrapes only"
    service = find(objects, "Service", "dra-solver")
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert by_name["grpc"]["targetPort"] == "grpc"
    assert by_name["metrics"]["targetPort"] == "metrics"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"
    ].items()


@pytest.mark.parametrize("name", OVERLAYS)
def test_controllers_call_the_solver_service(name: str) -> None:
    objects = overlay(name)
    deployment = find(objects, "Deployment", "dra-solver-controllers")
    args = parse_args(deployment)
    assert args.command == "controllers"
    service = find(objects, "Service", "dra-solver")
    grpc_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc")
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert args.solver == f"{host}:{grpc_port}"
    # TLS: the controllers verify the solver with the CA from the solver's own Secret.
    assert args.solver_ca, "the solver serves TLS only"
    solver = find(objects, "Deployment", "dra-solver")
    server_secret, _ = secret_file(solver, parse_args(solver).tls_cert)
    assert secret_file(deployment, args.solver_ca) == (server_secret, "ca.crt")
    projected = [
        v["secret"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v
    ]
    assert all(s.get("items") for s in projected), "the controllers get ca.crt, not the key"
    container = _container(deployment)
    metrics_port = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        assert _ports(container).get("metrics") == metrics_port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("name", OVERLAYS)
def test_kubelet_plugin_paths_and_config(name: str) -> None:
    objects = overlay(name)
    daemonset = find(objects, "DaemonSet", "dra-solver-kubelet-plugin")
    args = parse_args(daemonset)
    assert args.command == "kubelet-plugin"
    spec = daemonset["spec"]["template"]["spec"]
    container = _container(daemonset)
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == KUBELET_PATHS, "exactly the kubelet's plugin, registry and CDI dirs"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path in KUBELET_PATHS:
        assert path in mounts, f"{path} mounted at the same path as on the host"
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path

    def under_mount(path: str) -> str:
        hits = [m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")]
        assert hits, f"{path} is not on any mounted volume"
        return str(max(hits, key=len))

    plugin_dir = str(args.plugin_dir or f"/var/lib/kubelet/plugins/{args.driver}")
    checkpoint_dir = str(args.checkpoint_dir or plugin_dir)
    # The sockets must be where the kubelet looks: the plugin dir for the driver, the registry.
    assert under_mount(plugin_dir) == "/var/lib/kubelet/plugins"
    assert plugin_dir.rstrip("/").endswith(f"/{args.driver}")
    assert str(args.registry_dir).rstrip("/") == "/var/lib/kubelet/plugins_registry"
    assert str(args.cdi_dir).rstrip("/") == "/var/run/cdi"
    assert under_mount(checkpoint_dir) == "/var/lib/kubelet/plugins", (
        "the checkpoint must survive pod restarts"
    )
    # The simulated device config comes from the ConfigMap, under the key the flag names.
    config = str(args.config)
    config_mount = under_mount(config)
    volume = volumes[mounts[config_mount]["name"]]
    config_map = find(objects, "ConfigMap", volume["configMap"]["name"])
    key = config[len(config_mount) :].lstrip("/")
    assert key in config_map["data"]
    assert args.publish == "kube" and args.claim_source == "kube"
    # The probes look for the sockets where the plugin creates them.
    from dra_solver.kubeletplugin import driver

    sockets = {
        f"{plugin_dir.rstrip('/')}/{driver.DRA_SOCKET_NAME}",
        f"{str(args.registry_dir).rstrip('/')}/{driver.registration_socket_name(args.driver)}",
    }
    for probe in ("readinessProbe", "livenessProbe"):
        script = " ".join(container[probe]["exec"]["command"])
        assert set(re.findall(r"test -S (\S+)", script)) == sockets, probe
    # Its metrics endpoint listens on the pod's IP, on the container port Prometheus scrapes.
    assert args.metrics_port == _ports(container)["metrics"]
    assert args.metrics_address == "0.0.0.0"


@pytest.mark.parametrize("name", OVERLAYS)
def test_deviceclasses_select_the_plugins_driver(name: str) -> None:
    objects = overlay(name)
    args = parse_args(find(objects, "DaemonSet", "dra-solver-kubelet-plugin"))
    classes = [o for o in objects if o["kind"] == "DeviceClass"]
    assert classes
    for device_class in classes:
        expressions = " ".join(s["cel"]["expression"] for s in device_class["spec"]["selectors"])
        assert f"device.driver == '{args.driver}'" in expressions


def test_all_workloads_use_one_image_and_safe_defaults() -> None:
    for name in OVERLAYS:
        objects = overlay(name)
        images = set()
        for obj in objects:
            if obj["kind"] not in {"Deployment", "DaemonSet"}:
                continue
            container = _container(obj)
            images.add(container["image"])
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"]["drop"] == ["ALL"]
            assert not security.get("privileged", False)
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"])
            assert "memory" in resources["limits"]
            if obj["kind"] == "Deployment":
                pod_security = obj["spec"]["template"]["spec"]["securityContext"]
                assert pod_security["runAsNonRoot"] is True
        assert len(images) == 1, f"{name}: one image for all components, got {images}"


def test_solver_runs_two_replicas_and_controllers_elect_a_leader() -> None:
    for name in OVERLAYS:
        objects = overlay(name)
        assert find(objects, "Deployment", "dra-solver")["spec"]["replicas"] == 2
        controllers = find(objects, "Deployment", "dra-solver-controllers")
        assert controllers["spec"]["replicas"] >= 2
        args = parse_args(controllers)
        assert getattr(args, "leader_elect", True), "replicas > 1 need leader election"


def test_scrape_config_and_service_monitor_target_named_ports() -> None:
    objects = overlay("production")
    ports = {
        p["name"]
        for obj in objects
        if obj["kind"] in {"Deployment", "DaemonSet"}
        for p in _container(obj).get("ports", [])
    }
    config = yaml.safe_load((DEPLOY / "prometheus" / "scrape-config.yaml").read_text())
    (job,) = config["scrape_configs"]
    port_rules = [
        r for r in job["relabel_configs"]
        if r.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"]
    ]
    assert [r["regex"] for r in port_rules] == ["metrics"] and "metrics" in ports
    namespaces = job["kubernetes_sd_configs"][0]["namespaces"]["names"]
    assert namespaces == ["dra-solver"]


def test_controllers_and_solver_watch_the_same_device_taint_rules() -> None:
    from dra_solver.service.inventory import DEFAULT_KUBE_KINDS

    (kind,) = [k for k in DEFAULT_KUBE_KINDS if k.kind == "DeviceTaintRule"]
    args = parse_args(find(overlay("production"), "Deployment", "dra-solver-controllers"))
    assert args.device_taint_rule_version == kind.version
