"""The deployment files of ``docs/deploy/`` hold what the code says.

What is checked, offline:

- every manifest a kustomization lists is a valid Kubernetes object, by the
  OpenAPI schemas ``kubernetes_validate`` bundles, in strict mode (an unknown
  field is an error), for the oldest Kubernetes the manifests are for and the
  newest the validator knows; each kustomization lists exactly the manifests
  beside it (it is not an object itself);
- the Deployment's probes, ``preStop`` and ``terminationGracePeriodSeconds``
  follow the ``[edge]`` defaults the code defines (``EdgeSection``: the port,
  ``drain_grace_seconds``, ``drain_seconds``) and the margin ``flatgate up``
  gives a service past its drain (``gateway.cli.STOP_MARGIN``);
- the ConfigMap's TOML passes the check every service runs before it starts
  (``gateway.check.checked``), with the Secret's placeholders as its
  environment, and keeps those defaults;
- the credentials the config names come from the Secret, whose values are all
  marked placeholders; the Service, the autoscaler and the disruption budget
  reach the Deployment's pods; the CPU request is one CPU per worker;
- the Containerfile's entry point is the console script of ``pyproject.toml``
  running ``gateway``, its final stage installs nothing and runs as the user
  the Deployment expects.

The image itself is not built here (there is no container runtime).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.gateway import cli
from flatgate.proxy.gateway.check import checked
from flatgate.proxy.gateway.document import SERVICE_SCOPES, GatewayDocument

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "docs" / "deploy"
CONTAINERFILE = DEPLOY / "Containerfile"
# The oldest Kubernetes the manifests are for (the preStop `sleep` action is on
# by default from 1.30), and the newest the validator bundles.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
CONFIG_KEY = "config.toml"
PLACEHOLDER = "REPLACE-ME"

Manifest = dict[str, Any]


def kustomizations() -> list[Path]:
    return sorted(DEPLOY.rglob("kustomization.yaml"))


def listed(kustomization: Path) -> list[str]:
    data = yaml.safe_load(kustomization.read_text())
    assert data["kind"] == "Kustomization"
    return list(data["resources"])


@cache
def manifests() -> dict[str, Manifest]:
    """Every object of every file a kustomization lists, by ``file#index``."""
    out: dict[str, Manifest] = {}
    for kustomization in kustomizations():
        for name in listed(kustomization):
            path = kustomization.parent / name
            for i, obj in enumerate(yaml.safe_load_all(path.read_text())):
                out[f"{path.relative_to(DEPLOY).as_posix()}#{i}"] = obj
    return out


@cache
def base_objects() -> dict[str, Manifest]:
    """The base's objects, by kind (one of each)."""
    out: dict[str, Manifest] = {}
    for where, obj in manifests().items():
        if where.startswith("kubernetes/"):
            assert obj["kind"] not in out, f"two {obj['kind']}s in the base"
            out[obj["kind"]] = obj
    return out


def pod_spec() -> Manifest:
    spec: Manifest = base_objects()["Deployment"]["spec"]["template"]["spec"]
    return spec


def container() -> Manifest:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    found: Manifest = containers[0]
    return found


def secret_values() -> dict[str, str]:
    return dict(base_objects()["Secret"]["stringData"])


@cache
def config_document(tmp: Path) -> GatewayDocument:
    """The ConfigMap's file, read and checked as ``flatgate gateway`` does at
    start-up, with the Secret's values as the environment the pod gives it."""
    path = tmp / CONFIG_KEY
    path.write_text(base_objects()["ConfigMap"]["data"][CONFIG_KEY])
    doc, problems = checked(path, environ=secret_values(), scope=SERVICE_SCOPES["gateway"])
    assert problems == []
    assert doc is not None
    return doc


@pytest.fixture
def document(tmp_path_factory: pytest.TempPathFactory) -> GatewayDocument:
    return config_document(tmp_path_factory.getbasetemp())


def container_port(port: int | str) -> int:
    """A probe's or a Service's port, a number or the container port's name."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container()["ports"]}
    return int(named[port])


# -- the manifests are Kubernetes objects -------------------------------------


@pytest.mark.parametrize("kustomization", kustomizations(), ids=lambda p: p.parent.name)
def test_each_kustomization_lists_the_manifests_beside_it(kustomization: Path) -> None:
    beside = sorted(p.name for p in kustomization.parent.glob("*.yaml") if p != kustomization)
    assert sorted(listed(kustomization)) == beside


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("where", sorted(manifests()))
def test_every_manifest_validates(where: str, version: str) -> None:
    kubernetes_validate.validate(manifests()[where], version, strict=True)


def test_the_base_has_what_a_deployment_needs() -> None:
    kinds = {"Deployment", "Service", "ConfigMap", "Secret"}
    kinds |= {"HorizontalPodAutoscaler", "PodDisruptionBudget"}
    assert sorted(base_objects()) == sorted(kinds)


# -- the probes and the drain follow the code's defaults ----------------------


def test_the_config_keeps_the_defaults_the_deployment_follows(document: GatewayDocument) -> None:
    defaults, edge = EdgeSection(), document.edge
    assert edge.port == defaults.port
    assert edge.drain_grace_seconds == defaults.drain_grace_seconds
    assert edge.drain_seconds == defaults.drain_seconds


def test_the_probes_ask_the_gateway_on_its_port(document: GatewayDocument) -> None:
    c = container()
    assert container_port("http") == document.edge.port
    for probe, path in (
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ):
        get = c[probe]["httpGet"]
        assert get["path"] == path, probe
        assert container_port(get["port"]) == document.edge.port, probe
        assert get.get("scheme", "HTTP") == ("HTTPS" if document.edge.tls_cert_file else "HTTP")


def test_prestop_and_the_grace_period_follow_the_drain(document: GatewayDocument) -> None:
    """preStop sleeps drain_grace_seconds; the grace period, counted from the
    start of preStop, holds it, drain_seconds and the margin."""
    edge = document.edge
    sleep = container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert sleep == math.ceil(edge.drain_grace_seconds)
    grace = pod_spec()["terminationGracePeriodSeconds"]
    assert grace == math.ceil(sleep + edge.drain_seconds + cli.STOP_MARGIN)


def test_one_cpu_is_requested_per_worker(document: GatewayDocument) -> None:
    resources = container()["resources"]
    assert float(resources["requests"]["cpu"]) == document.edge.workers
    assert "cpu" not in resources.get("limits", {})


def test_the_autoscaler_scales_the_deployment_on_cpu() -> None:
    hpa = base_objects()["HorizontalPodAutoscaler"]["spec"]
    deployment = base_objects()["Deployment"]
    assert hpa["scaleTargetRef"]["kind"] == "Deployment"
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
    assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
    assert hpa["minReplicas"] >= 2  # a disruption budget of one leaves one serving


def test_the_service_and_the_budget_reach_the_pods() -> None:
    labels = base_objects()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service = base_objects()["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    assert {container_port(p["targetPort"]) for p in service["ports"]} == {container_port("http")}
    budget = base_objects()["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    assert budget.items() <= labels.items()


def test_the_config_is_mounted_where_the_command_reads_it() -> None:
    c = container()
    config = c["args"][c["args"].index("--config") + 1]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert "subPath" not in mount  # a subPath mount never sees an edit
    assert config == f"{mount['mountPath']}/{CONFIG_KEY}"
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == base_objects()["ConfigMap"]["metadata"]["name"]
    assert containerfile()["CMD"] == c["args"]


# -- credentials ------------------------------------------------------------


def test_the_secret_holds_placeholders_only() -> None:
    assert secret_values()
    assert [k for k, v in secret_values().items() if not v.startswith(PLACEHOLDER)] == []
    assert "data" not in base_objects()["Secret"]


def test_every_credential_the_config_names_comes_from_the_secret(
    document: GatewayDocument,
) -> None:
    named = {b.api_key_env for b in document.backends if b.api_key_env}
    named |= {e for e in (document.state.password_env, document.state.sentinel_password_env) if e}
    secret = base_objects()["Secret"]["metadata"]["name"]
    given = {}
    for env in container()["env"]:
        ref = env["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret
        assert ref["key"] in secret_values()
        given[env["name"]] = ref["key"]
    assert sorted(given) == sorted(named)


def test_the_store_is_the_redis_beside_the_base(document: GatewayDocument) -> None:
    """The [state] store names the trial Redis's Service; it takes the same
    password, from the same Secret."""
    url = urlsplit(document.state.store)
    service = manifests()["redis/redis.yaml#0"]
    assert (url.scheme, url.hostname) == ("redis", service["metadata"]["name"])
    assert url.port in {p["port"] for p in service["spec"]["ports"]}
    pod = manifests()["redis/redis.yaml#1"]["spec"]["template"]["spec"]
    refs = [e["valueFrom"]["secretKeyRef"] for e in pod["containers"][0]["env"]]
    assert {(r["name"], r["key"]) for r in refs} == {
        (base_objects()["Secret"]["metadata"]["name"], document.state.password_env)
    }


# -- the Containerfile ------------------------------------------------------


@cache
def instructions() -> tuple[tuple[str, str], ...]:
    """The Containerfile's instructions, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return tuple(out)


def final_stage() -> list[tuple[str, str]]:
    steps = list(instructions())
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def containerfile() -> dict[str, list[str]]:
    """The final stage's ENTRYPOINT and CMD, each in exec form."""
    found = {w: json.loads(rest) for w, rest in final_stage() if w in ("ENTRYPOINT", "CMD")}
    assert sorted(found) == ["CMD", "ENTRYPOINT"]
    return found


def test_the_image_runs_the_console_script_of_pyproject() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    command = [name for name, target in scripts.items() if target == f"{cli.__name__}:main"]
    assert containerfile()["ENTRYPOINT"] == [*command, "gateway"]
    assert "gateway" in cli.SERVICES


def test_the_final_stage_builds_nothing_and_is_not_root() -> None:
    stages = [rest for word, rest in instructions() if word == "FROM"]
    assert len(stages) >= 2
    final = final_stage()
    run = " ".join(rest for word, rest in final if word == "RUN")
    assert not re.search(r"\b(?:apt-get|apk|pip) install\b|\bgcc\b|build-essential", run)
    assert any(w == "COPY" and rest.startswith("--from=") for w, rest in final)
    user = [rest for word, rest in final if word == "USER"]
    assert len(user) == 1
    uid, _, gid = user[0].partition(":")
    security = pod_spec()["securityContext"]
    assert int(uid) != 0
    assert (int(uid), int(gid)) == (security["runAsUser"], security["runAsGroup"])
    assert security["runAsNonRoot"] is True
