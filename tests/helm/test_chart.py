"""The Helm chart: strict lint, rendering with defaults / every option / bad values, and every
manifest validated against Kubernetes 1.30 and 1.37 (helm-python-sdk, no helm binary)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

helm = pytest.importorskip("helm_python")

CHART = Path(__file__).resolve().parents[2] / "helm" / "ferry"
REQUIRED = {
    "zookeeper": {"connect": "zk-0.zk:2181,zk-1.zk:2181"},
    "kafka": {"bootstrap": "kafka:9092"},
    "database": {"url": "mysql+pymysql://ferry:db-password-x@mysql:3306/ferry"},
}
ALL_ON = {
    **REQUIRED,
    "kafka": {"bootstrap": "kafka:9093", "config": {"security.protocol": "SASL_SSL", "sasl.password": "sasl-secret-x"}},
    "admin": {"token": "admin-token-x"},
    "worker": {"autoscaling": {"enabled": True}, "endpointAllow": ["10.0.0.0/8", "*.svc.cluster.local"]},
    "portal": {"ingress": {"enabled": True, "className": "nginx", "tlsSecret": "ferry-tls"}, "pdb": {"enabled": True}},
    "gateway": {"autoscaling": {"enabled": True}},
    "metrics": {"serviceMonitor": {"enabled": True}},
    "networkPolicy": {"enabled": True},
    "replay": {"enabled": True, "persistentVolumeClaim": "ferry-reports"},
}
ZONES: dict[str, Any] = {
    **REQUIRED,
    "kafka": {
        "bootstrap": "kafka.dc1:9092",
        "defaultZone": "dc1",
        "clusters": {
            "dc2": {"bootstrap": "kafka.dc2:9092", "zone": "dc2", "config": {"sasl.password": "dc2-secret-x"}}
        },
    },
    "worker": {
        "zones": [
            {"name": "dc1", "replicas": 3},
            {"name": "dc2", "replicas": 2, "nodeSelector": {"site": "frankfurt"}},
        ]
    },
}
SUBSCRIPTIONS: dict[str, Any] = {
    **REQUIRED,
    "subscriptions": [{"name": "orders-to-billing", "topics": ["orders"], "endpoint": {"url": "http://billing/hook"}}],
    "subscriptionsApply": {"prune": True},
}
ZONES_SCALED = {**ZONES, "worker": {**ZONES["worker"], "autoscaling": {"enabled": True}}}  # one HPA per zone
KUBE_VERSIONS = ["1.30.0", "1.37.0"]
SECRETS = ["db-password-x", "sasl-secret-x", "admin-token-x"]


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(str(CHART))
    out = chart.render(values, name="ferry", namespace="ferry", is_install=True)
    docs = []
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod = spec["template"]["spec"]
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    return dict(spec["template"]["spec"])


@pytest.mark.parametrize(
    "values", [REQUIRED, ALL_ON, ZONES_SCALED, SUBSCRIPTIONS], ids=["defaults", "all-options", "zones", "subscriptions"]
)
def test_lint_strict(values: dict[str, Any]) -> None:
    report = helm.lint(str(CHART), values, strict=True)
    assert not report["errors"], report
    assert not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize(
    "values", [REQUIRED, ALL_ON, ZONES_SCALED, SUBSCRIPTIONS], ids=["defaults", "all-options", "zones", "subscriptions"]
)
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_manifests_validate_strictly(values: dict[str, Any], kube: str) -> None:
    docs = render(values)
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            continue  # a CRD: not in the Kubernetes schemas
        kubernetes_validate.validate(doc, kube, strict=True)


def test_what_matters() -> None:
    docs = render(ALL_ON)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for kind, name in [
        ("Deployment", "ferry-coordinator"),
        ("Deployment", "ferry-worker"),
        ("Deployment", "ferry-portal"),
        ("Service", "ferry-portal"),
        ("Ingress", "ferry-portal"),
        ("Job", "ferry-migrate"),
        ("HorizontalPodAutoscaler", "ferry-worker"),
        ("ServiceMonitor", "ferry"),
        ("CronJob", "ferry-replay"),
        ("ConfigMap", "ferry"),
        ("Secret", "ferry"),
        ("ServiceAccount", "ferry"),
        ("PodDisruptionBudget", "ferry-worker"),
        ("NetworkPolicy", "ferry-portal"),
        ("Deployment", "ferry-gateway"),
        ("Service", "ferry-gateway"),
        ("HorizontalPodAutoscaler", "ferry-gateway"),
        ("PodDisruptionBudget", "ferry-gateway"),
        ("NetworkPolicy", "ferry-gateway"),
    ]:
        assert (kind, name) in kinds, (kind, name)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    job = by[("Job", "ferry-migrate")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert containers(job)[0]["args"] == ["migrate"]
    # The secret the hook reads exists before it (lower hook weight).
    secret = by[("Secret", "ferry")]
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    assert by[("Deployment", "ferry-coordinator")]["spec"]["replicas"] == 2
    assert "replicas" not in by[("Deployment", "ferry-worker")]["spec"]  # the HPA owns it

    workloads = [d for d in docs if d["kind"] in ("Deployment", "Job", "CronJob")]
    for d in workloads:
        pod = pod_spec(d)
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in containers(d):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            if d["kind"] == "Deployment":
                # The portal's and gateway's /healthz check the database or Kafka: readiness only.
                live = "/metrics" if c["name"] in ("portal", "gateway") else "/healthz"
                assert c["livenessProbe"]["httpGet"]["path"] == live
                assert c["readinessProbe"]["httpGet"]["path"] in ("/readyz", "/healthz")
        if d["kind"] == "Deployment":
            # Labels and selectors agree.
            sel = d["spec"]["selector"]["matchLabels"]
            assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ann = d["spec"]["template"]["metadata"]["annotations"]
            assert ann["prometheus.io/scrape"] == "true" and "checksum/config" in ann
    worker = by[("Deployment", "ferry-worker")]
    grace = pod_spec(worker)["terminationGracePeriodSeconds"]
    assert grace * 1000 > 10000, "grace period must exceed the worker's drain timeout"
    gateway = by[("Deployment", "ferry-gateway")]
    assert containers(gateway)[0]["args"] == ["gateway"] and "replicas" not in gateway["spec"]
    assert pod_spec(gateway)["terminationGracePeriodSeconds"] * 1000 > 15000  # past the produce timeout
    assert containers(gateway)[0]["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    assert (
        by[("Service", "ferry-gateway")]["spec"]["selector"].items()
        <= gateway["spec"]["template"]["metadata"]["labels"].items()
    )
    assert by[("ConfigMap", "ferry")]["data"]["FERRY_GATEWAY_PORT"] == "8081"
    svc = by[("Service", "ferry-portal")]
    assert (
        svc["spec"]["selector"].items()
        <= by[("Deployment", "ferry-portal")]["spec"]["template"]["metadata"]["labels"].items()
    )

    # Secrets only in Secrets.
    for d in docs:
        if d["kind"] == "Secret":
            continue
        text = yaml.safe_dump(d)
        for s in SECRETS:
            assert s not in text, f"{s} leaked into {d['kind']} {d['metadata']['name']}"
    cm = by[("ConfigMap", "ferry")]["data"]
    assert cm["FERRY_ZK_CONNECT"] == "zk-0.zk:2181,zk-1.zk:2181" and cm["FERRY_METRICS_HOST"] == "0.0.0.0"


def test_grace_period_follows_the_drain_timeout() -> None:
    values = copy.deepcopy(REQUIRED)
    values["worker"] = {"drainTimeoutMs": 60000}
    worker = next(d for d in render(values) if d["kind"] == "Deployment" and d["metadata"]["name"] == "ferry-worker")
    assert pod_spec(worker)["terminationGracePeriodSeconds"] > 60


def test_existing_secret() -> None:
    values = {**REQUIRED, "database": {"existingSecret": "db-creds", "existingSecretKey": "url"}}
    docs = render(values)
    job = next(d for d in docs if d["kind"] == "Job")
    ref = containers(job)[0]["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "db-creds", "key": "url"}
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert "db-url" not in secret["stringData"]


@pytest.mark.parametrize(
    "bad",
    [
        {"worker": {"replicas": -1}},
        {"worker": {"replicas": "three"}},
        {"log": {"level": "LOUD"}},
        {"portal": {"service": {"type": "Magic"}}},
        {"coordinator": {"metricsPort": 70000}},
        {"worker": {"autoscaling": {"targetCPUUtilizationPercentage": 150}}},
        {"unknownKey": 1},
        {"image": {"pullPolicy": "Sometimes"}},
    ],
)
def test_bad_values_are_rejected(bad: dict[str, Any]) -> None:
    chart = helm.Chart.load(str(CHART))
    values = copy.deepcopy(REQUIRED)
    for k, v in bad.items():
        values[k] = {**values.get(k, {}), **v} if isinstance(v, dict) else v
    with pytest.raises(helm.HelmError):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmError):
        chart.render(values, name="ferry", namespace="ferry")


def test_missing_required_values_fail_with_a_clear_message() -> None:
    chart = helm.Chart.load(str(CHART))
    with pytest.raises(helm.HelmError, match=r"zookeeper\.connect is required"):
        chart.render(
            {"kafka": {"bootstrap": "k:9092"}, "database": {"url": "sqlite://"}}, name="ferry", namespace="ferry"
        )


def test_every_variable_the_chart_sets_is_a_setting() -> None:
    """A typo in the chart (or a setting renamed in code) would be silently ignored by the services."""
    from ferry.config import SETTINGS

    known = {s.env for s in SETTINGS}
    seen: set[str] = set()
    for doc in render(ALL_ON):
        if doc["kind"] == "ConfigMap":
            seen |= set(doc["data"])
        if doc["kind"] in ("Deployment", "Job", "CronJob"):
            for c in containers(doc):
                seen |= {e["name"] for e in c.get("env", []) if e["name"].startswith("FERRY_")}
    unknown = sorted(v for v in seen if v.startswith("FERRY_") and v not in known)
    assert not unknown, f"the chart sets variables no service reads: {unknown}"
    assert {"FERRY_GATEWAY_PORT", "FERRY_ZK_CONNECT", "FERRY_DB_URL"} <= seen


def env_of(doc: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for c in containers(doc) for e in c.get("env", [])}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_one_worker_deployment_per_zone(kube: str) -> None:
    docs = render(ZONES)
    for doc in docs:
        kubernetes_validate.validate(doc, kube, strict=True)
    workers = {
        d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment" and "worker" in d["metadata"]["name"]
    }
    assert set(workers) == {"ferry-worker-dc1", "ferry-worker-dc2"}
    dc1, dc2 = workers["ferry-worker-dc1"], workers["ferry-worker-dc2"]
    assert (dc1["spec"]["replicas"], dc2["spec"]["replicas"]) == (3, 2)
    assert env_of(dc1)["FERRY_ZONE"]["value"] == "dc1" and env_of(dc2)["FERRY_ZONE"]["value"] == "dc2"
    # dc1: the zone's nodes by their zone label; dc2: its own nodeSelector instead.
    term = pod_spec(dc1)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["dc1"]}
    ]
    assert pod_spec(dc2)["nodeSelector"] == {"site": "frankfurt"} and "affinity" not in pod_spec(dc2)
    for d, zone in ((dc1, "dc1"), (dc2, "dc2")):
        selector = d["spec"]["selector"]["matchLabels"]
        assert selector["ferry.dev/zone"] == zone == d["spec"]["template"]["metadata"]["labels"]["ferry.dev/zone"]
        spread = pod_spec(d)["topologySpreadConstraints"][0]
        assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["labelSelector"]["matchLabels"] == selector
    budgets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert {"ferry-worker-dc1", "ferry-worker-dc2"} <= set(budgets) and "ferry-worker" not in budgets
    assert budgets["ferry-worker-dc2"]["spec"]["selector"]["matchLabels"]["ferry.dev/zone"] == "dc2"
    # Every component knows the clusters; their settings come from the Secret, never in plain text.
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert config["data"]["FERRY_DEFAULT_KAFKA_ZONE"] == "dc1"
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert yaml.safe_load(secret["stringData"]["kafka-clusters"]) == ZONES["kafka"]["clusters"]
    for d in docs:
        if d["kind"] in ("Deployment", "Job", "CronJob") and "FERRY_KAFKA_CONFIG" in env_of(d):
            assert env_of(d)["FERRY_KAFKA_CLUSTERS"]["valueFrom"]["secretKeyRef"]["key"] == "kafka-clusters"
            assert "dc2-secret-x" not in yaml.safe_dump(d)


def test_without_zones_one_worker_deployment_as_before() -> None:
    docs = render(REQUIRED)
    workers = [d for d in docs if d["kind"] == "Deployment" and "worker" in d["metadata"]["name"]]
    assert [d["metadata"]["name"] for d in workers] == ["ferry-worker"]
    assert "FERRY_ZONE" not in env_of(workers[0])
    assert "ferry.dev/zone" not in workers[0]["spec"]["selector"]["matchLabels"]
    assert [
        d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget" and "worker" in d["metadata"]["name"]
    ] == ["ferry-worker"]


@pytest.mark.parametrize("name", ["DC1", "dc_1", "-dc", "a" * 41])
def test_a_bad_zone_name_is_refused(name: str) -> None:
    chart = helm.Chart.load(str(CHART))
    values: dict[str, Any] = copy.deepcopy(REQUIRED)
    values["worker"] = {"zones": [{"name": name}]}
    with pytest.raises(helm.HelmError):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmError):
        chart.render(values, name="ferry", namespace="ferry")


def test_subscriptions_are_applied_by_a_hook_only_when_listed() -> None:
    assert not [d for d in render(REQUIRED) if d["metadata"]["name"] == "ferry-subscriptions"]
    docs = {d["kind"]: d for d in render(SUBSCRIPTIONS) if d["metadata"]["name"] == "ferry-subscriptions"}
    assert set(docs) == {"ConfigMap", "Job"}
    assert yaml.safe_load(docs["ConfigMap"]["data"]["subscriptions.yaml"]) == SUBSCRIPTIONS["subscriptions"]
    job = docs["Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    (apply,) = containers(job)
    assert apply["args"] == ["apply", "-f", "/subscriptions/subscriptions.yaml", "--prune"]
    without_prune = {**SUBSCRIPTIONS, "subscriptionsApply": {"prune": False}}
    job = next(
        d for d in render(without_prune) if d["kind"] == "Job" and d["metadata"]["name"] == "ferry-subscriptions"
    )
    assert "--prune" not in containers(job)[0]["args"]


def _merge(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def test_the_documented_install_command_renders() -> None:
    """docs/kubernetes.md's `helm install` line, its `--set`s parsed as Helm parses them (a comma
    separates two values unless escaped), gives a chart that renders and validates."""
    import re
    import shlex

    doc = (CHART.parents[1] / "docs" / "kubernetes.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if b.startswith("helm install"))
    argv = shlex.split(block.replace("\\\n", " "))
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    values: dict[str, Any] = {}
    for expression in sets:
        _merge(values, helm.parse_set_string(expression))
    assert values["zookeeper"]["connect"] == "zk-0.zk:2181,zk-1.zk:2181,zk-2.zk:2181"
    assert values["kafka"]["bootstrap"] and values["database"]["url"].startswith("mysql+pymysql://")
    for manifest in render(values):
        kubernetes_validate.validate(manifest, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("component", ["portal", "gateway"])
def test_a_dependency_outage_does_not_restart_the_pods(component: str) -> None:
    """The portal's /healthz is 503 while the database is down, the gateway's while Kafka is: as a
    liveness probe it would restart every replica into a crash loop that outlasts the outage."""
    deployment = next(
        d for d in render(REQUIRED) if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(component)
    )
    (container,) = containers(deployment)
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] != "/healthz"


def test_every_gateway_and_transaction_setting_has_a_value() -> None:
    """FERRY_GATEWAY_* and FERRY_TXN_MAX_CHECKS (docs/operations.md) can each be set from values."""
    from ferry.config import SETTINGS

    wanted = {s.env for s in SETTINGS if s.env.startswith(("FERRY_GATEWAY_", "FERRY_TXN_"))}
    values = {**REQUIRED, "gateway": {"readTimeoutMs": 30000, "txnMaxChecks": 4}}
    data = next(d for d in render(values) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ferry")["data"]
    assert wanted <= set(data), sorted(wanted - set(data))
    assert (data["FERRY_GATEWAY_READ_TIMEOUT_MS"], data["FERRY_TXN_MAX_CHECKS"]) == ("30000", "4")
    chart = helm.Chart.load(str(CHART))
    with pytest.raises(helm.HelmError):
        chart.validate_schema({**REQUIRED, "gateway": {"txnMaxChecks": 0}})


@pytest.mark.parametrize(
    "values", [REQUIRED, ALL_ON, ZONES_SCALED, SUBSCRIPTIONS], ids=["defaults", "all-options", "zones", "subscriptions"]
)
def test_manifests_validate_on_the_oldest_kubernetes_the_chart_accepts(values: dict[str, Any]) -> None:
    """Chart.yaml's kubeVersion is what `helm install` lets through: every manifest must be valid
    there too (the gateway's preStop `sleep` action exists from Kubernetes 1.30)."""
    import re

    declared = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*(\d+\.\d+\.\d+)(-0)?", declared)
    assert match, f"kubeVersion {declared!r}: expected a lower bound like >=1.30.0-0"
    for doc in render(values):
        if doc["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(doc, match.group(1), strict=True)


def test_the_install_notes_say_how_to_reach_the_gateway() -> None:
    def notes(values: dict[str, Any]) -> str:
        out = helm.Chart.load(str(CHART)).render(values, name="ferry", namespace="ferry", is_install=True)
        return next(text for path, text in out.items() if path.endswith("NOTES.txt"))

    assert "port-forward svc/ferry-gateway 8081:80" in notes(REQUIRED)
    assert "ferry-gateway" not in notes({**REQUIRED, "gateway": {"enabled": False}})
