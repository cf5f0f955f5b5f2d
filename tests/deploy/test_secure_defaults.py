"""Secure by default: in the base and every overlay the solver serves gRPC with TLS only, a
NetworkPolicy admits only the controllers to it, the controllers trust its CA, and both ways of
getting the certificate (the documented command, the cert-manager component) give one the real
solver, probe and client accept.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.service.client import Client
from dra_solver.service.tls import is_loopback
from tests.deploy import kustomize, schema
from tests.deploy.manifests import DEPLOY, OVERLAYS, ROOT, find, rendered
from tests.deploy.test_consistency import _container, parse_args, parse_probe, secret_file

TARGETS = ["deploy/base", *(f"deploy/overlays/{name}" for name in OVERLAYS)]
SECRET_KEYS = {"tls.crt", "tls.key", "ca.crt"}
DOCS = ROOT / "docs" / "deploying.md"


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are checked here"
    return bool(selector.get("matchLabels")) and selector["matchLabels"].items() <= labels.items()


def service_dns_name(objects: tuple[dict[str, Any], ...]) -> str:
    service = find(objects, "Service", "dra-solver")
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"


# --- TLS only ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_solver_serves_tls_only(target: str) -> None:
    objects = rendered(target)
    solver = find(objects, "Deployment", "dra-solver")
    args = parse_args(solver)
    assert not args.insecure, "no plaintext gRPC in deploy/"
    assert args.tls_cert and args.tls_key
    assert is_loopback(args.address) or args.tls_cert, "serve refuses this combination anyway"
    cert, key = secret_file(solver, args.tls_cert), secret_file(solver, args.tls_key)
    assert cert == ("dra-solver-tls", "tls.crt") and key == ("dra-solver-tls", "tls.key")
    probe = parse_probe(_container(solver)["readinessProbe"])
    assert secret_file(solver, probe.tls_ca) == ("dra-solver-tls", "ca.crt")
    assert probe.server_name == service_dns_name(objects), "verified as clients verify it"
    tls_volume = next(
        v for v in solver["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"
    )
    mode = tls_volume["secret"]["defaultMode"]
    assert mode & 0o077 == 0o040, "the key is readable by the pod's fsGroup only"
    assert solver["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 65532


def test_no_manifest_asks_for_plaintext_or_an_unprotected_wildcard_address() -> None:
    for path in sorted(DEPLOY.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
        assert "--insecure" not in code, path


# --- NetworkPolicy in the base ----------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_network_policy_admits_only_the_controllers_to_grpc(target: str) -> None:
    objects = rendered(target)
    solver = find(objects, "Deployment", "dra-solver")
    controllers = find(objects, "Deployment", "dra-solver-controllers")
    ports = {p["name"]: p["containerPort"] for p in _container(solver)["ports"]}
    policies = [
        o for o in objects
        if o["kind"] == "NetworkPolicy" and _selects(o["spec"]["podSelector"], _labels(solver))
    ]
    assert len(policies) == 1, "one NetworkPolicy selects the solver pods"
    (policy,) = policies
    assert "Ingress" in policy["spec"]["policyTypes"]
    reached: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        assert rule.get("ports"), "a rule without ports would open every port"
        for port in rule["ports"]:
            name = port["port"] if isinstance(port["port"], str) else next(
                n for n, number in ports.items() if number == port["port"]
            )
            assert name in ports, f"{name} is not a port of the solver container"
            reached.setdefault(name, []).extend(rule.get("from", [{}]))
    assert set(reached) == {"grpc", "metrics"}
    for peer in reached["grpc"]:
        assert set(peer) == {"podSelector"}, f"gRPC open to {peer}"
        assert _selects(peer["podSelector"], _labels(controllers))
        assert not _selects(peer["podSelector"], _labels(solver))


# --- where the certificate comes from -----------------------------------------------------


def _render_with_cert_manager(tmp_path: Path) -> tuple[dict[str, Any], ...]:
    # A user's overlay: the base plus the component (relative paths, as kustomize requires).
    (tmp_path / "deploy").symlink_to(DEPLOY)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../deploy/base]\ncomponents: [../deploy/components/cert-manager]\n",
        encoding="utf-8",
    )
    objects = tuple(kustomize.render(overlay))
    if shutil.which("kubectl"):
        done = subprocess.run(
            ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        theirs = [o for o in yaml.safe_load_all(done.stdout) if o]
        key = kustomize.identity
        assert sorted(map(key, theirs)) == sorted(map(key, objects))
    return objects


def test_cert_manager_component_issues_the_secret_the_manifests_use(tmp_path: Path) -> None:
    objects = _render_with_cert_manager(tmp_path)
    crds = [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    assert {o["kind"] for o in crds} == {"Issuer", "Certificate"}
    for obj in crds:
        assert schema.cert_manager_errors(obj) == [], kustomize.identity(obj)
        assert obj["metadata"]["namespace"] == "dra-solver"
    issuers = {o["metadata"]["name"]: o for o in crds if o["kind"] == "Issuer"}
    certificates = {o["spec"]["secretName"]: o for o in crds if o["kind"] == "Certificate"}
    for cert in certificates.values():
        ref = cert["spec"]["issuerRef"]
        assert (ref["group"], ref["kind"]) == ("cert-manager.io", "Issuer")
        assert ref["name"] in issuers
    # The CA issuer signs with the CA certificate's Secret; the CA is self-signed.
    ca_issuer = issuers[certificates["dra-solver-tls"]["spec"]["issuerRef"]["name"]]
    ca_cert = certificates[ca_issuer["spec"]["ca"]["secretName"]]
    assert ca_cert["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"]
    # The serving certificate names what the controllers dial and the probe verifies.
    serving = certificates["dra-solver-tls"]["spec"]
    assert "server auth" in serving["usages"]
    solver = find(objects, "Deployment", "dra-solver")
    controllers = parse_args(find(objects, "Deployment", "dra-solver-controllers"))
    probe = parse_probe(_container(solver)["readinessProbe"])
    assert controllers.solver.rpartition(":")[0] in serving["dnsNames"]
    assert probe.server_name in serving["dnsNames"]
    assert secret_file(solver, parse_args(solver).tls_cert)[0] == "dra-solver-tls"


def _doc_commands() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    commands: list[str] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        commands += [line[2:] for line in joined.splitlines() if line.startswith("$ ")]
    return commands


def _documented(tool: str, *words: str) -> list[str]:
    hits = [c for c in _doc_commands() if c.split()[:1] == [tool] and all(w in c for w in words)]
    assert len(hits) == 1, f"expected one documented `{tool} {' '.join(words)}` command"
    return shlex.split(hits[0])


def test_documented_secret_has_the_keys_the_manifests_read() -> None:
    argv = _documented("kubectl", "create", "secret")
    assert argv[argv.index("-n") + 1] == "dra-solver"
    assert argv[argv.index("secret") + 1 : argv.index("secret") + 3] == ["generic", "dra-solver-tls"]
    keys = set()
    for arg in argv:
        if arg.startswith("--from-file="):
            source = arg.split("=", 1)[1]
            keys.add(source.split("=", 1)[0] if "=" in source else Path(source).name)
    assert keys == SECRET_KEYS


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_documented_dev_certificate_works_with_the_real_solver(tmp_path: Path) -> None:
    """Run the documented openssl command, serve with its output as the Deployment does, and
    check it from the readiness probe (same flags as the manifest) and from a client."""
    argv = _documented("openssl", "req")
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    files = {"tls.crt": tmp_path / "tls.crt", "tls.key": tmp_path / "tls.key"}
    files["ca.crt"] = files["tls.crt"]  # the documented secret uses the certificate as its CA

    objects = rendered("deploy/overlays/dev")
    solver = find(objects, "Deployment", "dra-solver")
    serve = parse_args(solver)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "dra_solver.cli", "serve",
            "--inventory", str(ROOT / "examples" / "demo" / "cluster.yaml"),
            "--address", "127.0.0.1", "--port", "0", "--metrics-port", "-1",
            "--tls-cert", str(files[secret_file(solver, serve.tls_cert)[1]]),
            "--tls-key", str(files[secret_file(solver, serve.tls_key)[1]]),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:  # the listening line comes once the port is bound
            seen.append(line)
            if match := re.search(r"grpc=127\.0\.0\.1:(\d+)", line):
                break
        else:
            raise AssertionError("serve exited:\n" + "".join(seen))
        address = f"127.0.0.1:{match.group(1)}"

        probe = parse_probe(_container(solver)["readinessProbe"])
        probe_argv = _probe_argv(probe, address=address, ca=files["ca.crt"])
        # serve opens its port before the inventory is loaded: the probe fails until it is.
        for _ in range(30):
            ok = subprocess.run(probe_argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
            if ok.returncode == 0:
                break
            time.sleep(0.5)
        assert (ok.returncode, ok.stdout.strip()) == (0, f"{address}: SERVING"), ok.stderr
        # Without the right name the certificate is not accepted: the check is real.
        wrong = _probe_argv(probe, address=address, ca=files["ca.crt"], name="elsewhere.svc")
        bad = subprocess.run(wrong, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "UNAVAILABLE" in bad.stderr

        with Client(address, tls_ca=str(files["ca.crt"]), server_name=service_dns_name(objects),
                    timeout=10) as client:
            client.wait_ready(timeout=30)
    finally:
        proc.terminate()
        proc.wait(30)


def _probe_argv(probe: argparse.Namespace, *, address: str, ca: Path, name: str = "") -> list[str]:
    return [
        sys.executable, "-m", "dra_solver.service.healthcheck", f"--address={address}", f"--tls-ca={ca}",
        f"--server-name={name or probe.server_name}", "--timeout=10",
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert=c.pem"], "--tls-cert and --tls-key go together"),
        (["--server-name=dra-solver.dra-solver.svc"], "--server-name needs --tls-ca"),
        (["--tls-ca=/nonexistent/ca.crt"], "cannot read /nonexistent/ca.crt"),
    ],
)
def test_healthcheck_flag_errors_exit_2(flags: list[str], message: str) -> None:
    from dra_solver.service import healthcheck

    code, line = healthcheck.check(healthcheck.build_parser().parse_args(flags))
    assert code == 2 and message in line, line
