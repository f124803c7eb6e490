"""The Kubernetes manifests agree with the code and hold the posture the deployment issue asks.

Every check runs on every file under deploy/kubernetes/ and must find nothing; then, for each
check, a mutated copy of a real manifest shows the check reports the drift it exists for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.drift import (
    KUBERNETES_VERSION,
    command_problems,
    env_name_problems,
    grace_problems,
    memory_problems,
    probe_problems,
    schema_problems,
    settings_problems,
)
from tests.deploy.kube import MANIFEST_DIR, Manifest, all_manifests, load_manifest, workloads
from tests.deploy.posture import (
    disruption_problems,
    identity_problems,
    resource_problems,
    security_problems,
    service_problems,
)
from tests.deploy.reach import CLIENT_LABEL, client_access_problems, network_policy_problems

MANIFESTS = all_manifests()
SINGLE = load_manifest(MANIFEST_DIR / "single.yaml")
SQS = load_manifest(MANIFEST_DIR / "sidecar-sqs.yaml")
PUBSUB = load_manifest(MANIFEST_DIR / "sidecar-pubsub.yaml")
every_manifest = pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda m: m.name)


def pod(manifest: Manifest) -> dict[str, Any]:
    return next(workloads(manifest)).pod


def container(manifest: Manifest, name: str | None = None) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod(manifest)["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def document(manifest: Manifest, kind: str, name: str) -> dict[str, Any]:
    found = manifest.named(kind, name)
    assert found is not None, f"{manifest.name} has no {kind}/{name}; update this test"
    return found


def set_env(spec: dict[str, Any], name: str, value: str) -> None:
    env: list[dict[str, Any]] = spec.setdefault("env", [])
    for item in env:
        if item["name"] == name:
            item["value"] = value
            return
    env.append({"name": name, "value": value})


def rename_env(spec: dict[str, Any], old: str, new: str) -> None:
    for item in spec["env"]:
        if item["name"] == old:
            item["name"] = new


def test_the_three_shapes_are_all_there() -> None:
    assert {m.name for m in MANIFESTS} == {"single.yaml", "sidecar-sqs.yaml",
                                           "sidecar-pubsub.yaml"}


def test_the_pinned_kubernetes_schemas_ship_inside_the_validator_so_the_check_runs_offline(
) -> None:
    assert KUBERNETES_VERSION in {v.rpartition(".")[0] for v in
                                  kubernetes_validate.utils.all_versions()}
    package = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    strict = package / f"v{KUBERNETES_VERSION}.0-local-strict"
    assert (strict / "deployment-apps-v1.json").is_file()
    assert (strict / "_definitions.json").is_file()


# Every manifest passes every check.


@every_manifest
def test_every_manifest_validates_against_the_pinned_kubernetes_schemas(
        manifest: Manifest) -> None:
    assert schema_problems(manifest) == []


@every_manifest
def test_every_variable_a_manifest_sets_is_one_mirrorgate_or_its_sdks_read(
        manifest: Manifest) -> None:
    assert env_name_problems(manifest) == []


@every_manifest
def test_every_container_environment_passes_the_real_settings_loader(
        manifest: Manifest, tmp_path: Path) -> None:
    assert settings_problems(manifest, tmp_path) == []


@every_manifest
def test_what_the_proxy_learns_persists_through_a_restart_of_its_pod(
        manifest: Manifest, tmp_path: Path) -> None:
    # first-party names and withdrawals must hold when an upstream is silent after a restart
    assert memory_problems(manifest, tmp_path) == []


@every_manifest
def test_the_worker_beside_the_proxy_reads_the_same_state_store(manifest: Manifest) -> None:
    # a sidecar worker retires a job for a withdrawn version only if it sees the withdrawal
    [workload] = workloads(manifest)
    mounts = {c.name: {(m["name"], m["mountPath"]) for m in c.mounts()}
              for c in workload.containers}
    assert all(("data", "/var/lib/mirrorgate") in found for found in mounts.values())
    stores = {(c.env().get("MIRRORGATE_DATABASE_URL_FILE"), c.env().get("MIRRORGATE_DATA_DIR"))
              for c in workload.containers}
    assert len(stores) == 1


@pytest.mark.parametrize("manifest", [SQS, PUBSUB], ids=lambda m: m.name)
def test_a_fleet_keeps_its_state_in_postgresql_from_a_secret_and_claims_no_volume(
        manifest: Manifest) -> None:
    # replicas in several pods agree on first-party names and withdrawals only through one
    # store; a read-write-many volume is what this replaces (docs/deployment.md)
    [workload] = workloads(manifest)
    spec = workload.deployment["spec"]
    assert workload.deployment["kind"] == "Deployment"
    assert "volumeClaimTemplates" not in spec
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert not any("persistentVolumeClaim" in v for v in volumes.values())
    assert volumes["database"]["secret"]["secretName"] == "mirrorgate-database"
    for container in workload.containers:
        assert container.env()["MIRRORGATE_DATABASE_URL_FILE"] == (
            "/var/run/secrets/mirrorgate-database/url")
        assert {"name": "database", "mountPath": "/var/run/secrets/mirrorgate-database",
                "readOnly": True} in container.mounts()


def test_a_data_directory_on_an_empty_dir_is_reported(tmp_path: Path) -> None:
    def ephemeral(m: Manifest) -> None:
        next(workloads(m)).deployment["spec"].pop("volumeClaimTemplates")
        pod(m)["volumes"].append({"name": "data", "emptyDir": {}})

    [problem] = memory_problems(SINGLE.mutated(ephemeral), tmp_path)
    assert "a volume that dies with the pod" in problem
    assert "MIRRORGATE_DATABASE_URL" in problem


def test_a_data_directory_on_the_root_filesystem_is_reported(tmp_path: Path) -> None:
    def unmounted(m: Manifest) -> None:
        spec = container(m)
        spec["volumeMounts"] = [v for v in spec["volumeMounts"] if v["name"] != "data"]

    [problem] = memory_problems(SINGLE.mutated(unmounted), tmp_path)
    assert "is on the read-only root filesystem" in problem


@every_manifest
def test_the_probes_ask_the_paths_and_ports_the_processes_serve(manifest: Manifest) -> None:
    assert probe_problems(manifest) == []


@every_manifest
def test_the_grace_period_outlasts_the_drain(manifest: Manifest) -> None:
    assert grace_problems(manifest) == []


@every_manifest
def test_the_container_args_are_commands_mirrorgate_knows(manifest: Manifest) -> None:
    assert command_problems(manifest) == []


@every_manifest
def test_every_container_is_hardened(manifest: Manifest) -> None:
    assert security_problems(manifest) == []


@every_manifest
def test_every_container_has_requests_and_limits_that_fit_its_settings(
        manifest: Manifest) -> None:
    assert resource_problems(manifest) == []


@every_manifest
def test_a_service_routes_to_the_proxy_port(manifest: Manifest) -> None:
    assert service_problems(manifest) == []


@every_manifest
def test_a_disruption_budget_keeps_a_proxy_up_without_blocking_drains(
        manifest: Manifest) -> None:
    assert disruption_problems(manifest) == []


@every_manifest
def test_each_cloud_queue_comes_with_its_cloud_identity(manifest: Manifest) -> None:
    assert identity_problems(manifest) == []


@every_manifest
def test_a_network_policy_admits_only_labelled_namespaces_to_the_proxy_port(
        manifest: Manifest) -> None:
    assert network_policy_problems(manifest) == []


@every_manifest
def test_the_proxy_reads_client_tokens_from_an_optional_secret_and_sets_its_public_url(
        manifest: Manifest) -> None:
    assert client_access_problems(manifest) == []


def test_the_docs_name_the_namespace_label_the_network_policies_admit() -> None:
    docs = (MANIFEST_DIR.parents[1] / "docs" / "deployment.md").read_text(encoding="utf-8")
    [(key, value)] = CLIENT_LABEL.items()
    assert f'`{key}: "{value}"`' in docs
    assert f"kubectl label namespace builds {key}={value}" in docs


# Each check reports the drift it exists for.


def test_a_misspelled_field_fails_schema_validation() -> None:
    broken = SINGLE.mutated(lambda m: container(m).update(livenessProbes={}))
    [problem] = schema_problems(broken)
    assert "'livenessProbes' was unexpected" in problem


def test_an_unknown_kind_is_reported_rather_than_skipped() -> None:
    broken = SINGLE.mutated(lambda m: m.documents.append(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
    [problem] = schema_problems(broken)
    assert "Widget" in problem


def test_a_misspelled_variable_is_reported_with_the_name_it_resembles() -> None:
    broken = SINGLE.mutated(lambda m: rename_env(container(m), "MIRRORGATE_CACHE_MAX_BYTES",
                                                 "MIRRORGATE_CACHE_MAX_BYTE"))
    [problem] = env_name_problems(broken)
    assert "MIRRORGATE_CACHE_MAX_BYTE," in problem
    assert "did you mean MIRRORGATE_CACHE_MAX_BYTES" in problem


def test_a_value_hidden_in_value_from_is_reported() -> None:
    def hide(m: Manifest) -> None:
        container(m)["env"].append({"name": "MIRRORGATE_PRIVATE_TOKEN", "valueFrom": {
            "secretKeyRef": {"name": "mirrorgate-private-token", "key": "token"}}})

    [problem] = env_name_problems(SINGLE.mutated(hide))
    assert "valueFrom" in problem


def test_a_value_the_loader_refuses_is_reported_naming_the_variable(tmp_path: Path) -> None:
    broken = SQS.mutated(lambda m: set_env(container(m, "worker"), "MIRROR_POLL_WAIT_SECONDS",
                                           "45"))
    [problem] = settings_problems(broken, tmp_path)
    assert "container/worker: MIRROR_POLL_WAIT_SECONDS" in problem


def test_a_pubsub_container_missing_its_subscription_is_reported(tmp_path: Path) -> None:
    def drop(m: Manifest) -> None:
        proxy = container(m, "proxy")
        proxy["env"] = [e for e in proxy["env"] if e["name"] != "MIRROR_PUBSUB_SUBSCRIPTION"]

    [problem] = settings_problems(PUBSUB.mutated(drop), tmp_path)
    assert "MIRROR_PUBSUB_SUBSCRIPTION: is required" in problem


def test_a_missing_public_upstream_is_reported_since_the_image_has_no_npm(
        tmp_path: Path) -> None:
    def drop(m: Manifest) -> None:
        spec = container(m)
        spec["env"] = [e for e in spec["env"] if e["name"] != "MIRRORGATE_PUBLIC_UPSTREAM"]

    [problem] = settings_problems(SINGLE.mutated(drop), tmp_path)
    assert "MIRRORGATE_PUBLIC_UPSTREAM: is not set" in problem


def test_a_token_file_outside_the_secret_mount_is_reported(tmp_path: Path) -> None:
    broken = SINGLE.mutated(lambda m: set_env(container(m), "MIRRORGATE_PRIVATE_TOKEN_FILE",
                                              "/etc/mirrorgate-token"))
    [problem] = settings_problems(broken, tmp_path)
    assert "MIRRORGATE_PRIVATE_TOKEN_FILE: cannot read /etc/mirrorgate-token" in problem


def test_a_rules_file_the_rules_loader_refuses_is_reported(tmp_path: Path) -> None:
    def typo(m: Manifest) -> None:
        document(m, "ConfigMap", "mirrorgate-single-rules")["data"]["rules.toml"] = (
            '[age]\nminimun = "3d"\n')

    [problem] = settings_problems(SINGLE.mutated(typo), tmp_path)
    assert "the rules file does not load" in problem
    assert "minimun" in problem


def test_a_rules_configmap_missing_from_the_manifest_is_reported(tmp_path: Path) -> None:
    def drop(m: Manifest) -> None:
        m.documents.remove(document(m, "ConfigMap", "mirrorgate-single-rules"))

    problems = settings_problems(SINGLE.mutated(drop), tmp_path)
    assert any("ConfigMap 'mirrorgate-single-rules', which is not in single.yaml" in p
               for p in problems)


def test_a_file_store_on_the_read_only_root_filesystem_is_reported(tmp_path: Path) -> None:
    def embedded(m: Manifest) -> None:
        spec = container(m)
        spec["env"] = [e for e in spec["env"] if e["name"] != "MIRRORGATE_PRIVATE_UPSTREAM"]
        set_env(spec, "MIRRORGATE_DATA_DIR", "/srv/mirrorgate")  # under no mount

    [problem] = settings_problems(SINGLE.mutated(embedded), tmp_path)
    assert "read-only root filesystem" in problem


def test_a_file_store_on_a_writable_volume_passes(tmp_path: Path) -> None:
    def embedded(m: Manifest) -> None:
        spec = container(m)
        spec["env"] = [e for e in spec["env"] if e["name"] != "MIRRORGATE_PRIVATE_UPSTREAM"]
        set_env(spec, "MIRRORGATE_DATA_DIR", "/srv/mirrorgate")
        spec["volumeMounts"].append({"name": "store", "mountPath": "/srv/mirrorgate"})
        pod(m)["volumes"].append({"name": "store", "emptyDir": {}})

    assert settings_problems(SINGLE.mutated(embedded), tmp_path) == []


def test_a_wrong_probe_port_is_reported() -> None:
    def wrong(m: Manifest) -> None:
        container(m, "worker")["livenessProbe"]["httpGet"]["port"] = 8080

    [problem] = probe_problems(SQS.mutated(wrong))
    assert "container/worker: livenessProbe probes port 8080 (8080)" in problem
    assert "MIRRORGATE_WORKER_LISTEN puts the listener on 8081" in problem


def test_a_probe_naming_another_containers_port_is_reported() -> None:
    def wrong(m: Manifest) -> None:
        container(m, "worker")["readinessProbe"]["httpGet"]["port"] = "http"

    [problem] = probe_problems(PUBSUB.mutated(wrong))
    assert "container/worker: readinessProbe names port 'http', which the container" in problem


def test_a_listener_moved_without_its_probes_is_reported() -> None:
    broken = SINGLE.mutated(lambda m: set_env(container(m), "MIRRORGATE_LISTEN", "0.0.0.0:9090"))
    problems = probe_problems(broken)
    assert any("declares no containerPort 9090" in p for p in problems)
    assert any("readinessProbe probes port 'http' (8080)" in p for p in problems)


def test_a_probe_path_the_process_does_not_serve_is_reported() -> None:
    def wrong(m: Manifest) -> None:
        container(m)["readinessProbe"]["httpGet"]["path"] = "/healthz"

    [problem] = probe_problems(SINGLE.mutated(wrong))
    assert "readinessProbe asks for '/healthz'" in problem


def test_a_listener_on_loopback_is_reported_as_unreachable_by_the_kubelet() -> None:
    def loopback(m: Manifest) -> None:
        container(m, "worker")["env"] = [e for e in container(m, "worker")["env"]
                                         if e["name"] != "MIRRORGATE_WORKER_LISTEN"]

    [problem] = probe_problems(PUBSUB.mutated(loopback))
    assert "MIRRORGATE_WORKER_LISTEN listens on 127.0.0.1" in problem


def test_a_grace_period_shorter_than_the_drain_is_reported() -> None:
    broken = SINGLE.mutated(lambda m: pod(m).update(terminationGracePeriodSeconds=30))
    [problem] = grace_problems(broken)
    assert "terminationGracePeriodSeconds is 30 s, but a stop can take 50 s" in problem


def test_a_longer_drain_timeout_without_a_longer_grace_period_is_reported() -> None:
    broken = SQS.mutated(lambda m: set_env(container(m, "worker"),
                                           "MIRRORGATE_DRAIN_TIMEOUT", "60"))
    [problem] = grace_problems(broken)
    assert "container/worker" in problem
    assert "MIRRORGATE_DRAIN_TIMEOUT 60" in problem


def test_an_unknown_subcommand_is_reported() -> None:
    broken = SINGLE.mutated(lambda m: container(m).update(args=["proxy"]))
    [problem] = command_problems(broken)
    assert "args ['proxy'] are not a mirrorgate command" in problem


def test_an_unknown_option_is_reported() -> None:
    broken = SQS.mutated(lambda m: container(m, "proxy").update(args=["serve", "--no-workers"]))
    [problem] = command_problems(broken)
    assert "--no-workers" in problem


def test_a_command_that_replaces_the_entrypoint_is_reported() -> None:
    broken = SINGLE.mutated(lambda m: container(m).update(command=["python", "-m", "mirrorgate"]))
    [problem] = command_problems(broken)
    assert "replaces the image's `mirrorgate` entrypoint" in problem


def test_a_sidecar_worker_on_the_memory_queue_is_reported() -> None:
    broken = SQS.mutated(lambda m: set_env(container(m, "worker"), "MIRROR_QUEUE_PROVIDER",
                                           "memory"))
    [problem] = command_problems(broken)
    assert "container/worker: runs `mirrorgate worker` on MIRROR_QUEUE_PROVIDER=memory" in problem


def test_a_proxy_and_worker_on_different_queues_are_reported() -> None:
    broken = SQS.mutated(lambda m: set_env(
        container(m, "worker"), "MIRROR_SQS_QUEUE_URL",
        "https://sqs.eu-west-1.amazonaws.com/111122223333/another-queue"))
    [problem] = command_problems(broken)
    assert "its containers use different queues" in problem


def test_a_writable_root_filesystem_is_reported() -> None:
    def writable(m: Manifest) -> None:
        container(m)["securityContext"]["readOnlyRootFilesystem"] = False

    [problem] = security_problems(SINGLE.mutated(writable))
    assert "readOnlyRootFilesystem" in problem


def test_each_missing_hardening_setting_is_reported() -> None:
    def soften(m: Manifest) -> None:
        del pod(m)["securityContext"]
        container(m, "worker")["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"]}}
        container(m, "worker")["volumeMounts"] = []

    problems = "\n".join(security_problems(PUBSUB.mutated(soften)))
    for expected in ("runAsNonRoot", "runAsUser", "seccompProfile", "allowPrivilegeEscalation",
                     "drop ALL", "NET_ADMIN", "emptyDir at /tmp"):
        assert expected in problems


def test_a_cache_raised_past_the_memory_limit_is_reported() -> None:
    broken = SQS.mutated(lambda m: set_env(container(m, "proxy"), "MIRRORGATE_CACHE_MAX_BYTES",
                                           str(512 * 1024 * 1024)))
    [problem] = resource_problems(broken)
    assert "container/proxy: its memory limit (768 MiB) is below what its settings need" in problem


def test_a_bigger_tarball_cap_without_more_memory_is_reported() -> None:
    broken = PUBSUB.mutated(lambda m: set_env(container(m, "worker"),
                                              "MIRRORGATE_MAX_TARBALL_BYTES",
                                              str(256 * 1024 * 1024)))
    [problem] = resource_problems(broken)
    assert "container/worker: its memory limit (640 MiB)" in problem


def test_a_cache_left_at_its_default_is_reported() -> None:
    def default(m: Manifest) -> None:
        spec = container(m)
        spec["env"] = [e for e in spec["env"] if e["name"] != "MIRRORGATE_CACHE_MAX_BYTES"]

    problems = resource_problems(SINGLE.mutated(default))
    assert any("leaves MIRRORGATE_CACHE_MAX_BYTES at its default" in p for p in problems)


def test_missing_requests_and_limits_are_reported() -> None:
    broken = SINGLE.mutated(lambda m: container(m).update(resources={"limits": {"cpu": "1"}}))
    problems = resource_problems(broken)
    assert len(problems) == 3
    assert all("sets no" in p for p in problems)


def test_a_service_targeting_another_port_is_reported() -> None:
    def wrong(m: Manifest) -> None:
        [port] = document(m, "Service", "mirrorgate-sqs")["spec"]["ports"]
        port["targetPort"] = "worker-health"

    [problem] = service_problems(SQS.mutated(wrong))
    assert "targets 'worker-health' (8081), not the proxy's MIRRORGATE_LISTEN port 8080" in problem


def test_a_service_selecting_no_proxy_pods_is_reported() -> None:
    def wrong(m: Manifest) -> None:
        document(m, "Service", "mirrorgate-single")["spec"]["selector"] = {
            "app.kubernetes.io/name": "something-else"}

    [problem] = service_problems(SINGLE.mutated(wrong))
    assert "no Service in single.yaml selects its pods" in problem


def test_a_proxy_without_a_disruption_budget_is_reported() -> None:
    def drop(m: Manifest) -> None:
        m.documents.remove(document(m, "PodDisruptionBudget", "mirrorgate-pubsub"))

    [problem] = disruption_problems(PUBSUB.mutated(drop))
    assert "no PodDisruptionBudget" in problem


def test_a_disruption_budget_that_blocks_node_drains_is_reported() -> None:
    def block(m: Manifest) -> None:
        spec = document(m, "PodDisruptionBudget", "mirrorgate-single")["spec"]
        del spec["maxUnavailable"]
        spec["minAvailable"] = 2

    [problem] = disruption_problems(SINGLE.mutated(block))
    assert "minAvailable 2 with 2 replicas blocks every node drain" in problem


def test_an_sqs_pod_without_an_irsa_role_is_reported() -> None:
    def drop(m: Manifest) -> None:
        document(m, "ServiceAccount", "mirrorgate-sqs")["metadata"]["annotations"] = {}

    [problem] = identity_problems(SQS.mutated(drop))
    assert "eks.amazonaws.com/role-arn" in problem


def test_a_pubsub_pod_naming_a_missing_service_account_is_reported() -> None:
    broken = PUBSUB.mutated(lambda m: pod(m).update(serviceAccountName="default"))
    [problem] = identity_problems(broken)
    assert "serviceAccountName ('default') is no ServiceAccount" in problem


def policy(manifest: Manifest) -> dict[str, Any]:
    [found] = manifest.of_kind("NetworkPolicy")
    return found


def test_a_proxy_without_a_network_policy_is_reported() -> None:
    [problem] = network_policy_problems(SINGLE.mutated(
        lambda m: m.documents.remove(policy(m))))
    assert "no NetworkPolicy in single.yaml selects its pods" in problem


def test_a_network_policy_selecting_other_pods_is_reported() -> None:
    def elsewhere(m: Manifest) -> None:
        policy(m)["spec"]["podSelector"] = {"matchLabels": {"app": "other"}}

    [problem] = network_policy_problems(SQS.mutated(elsewhere))
    assert "no NetworkPolicy in sidecar-sqs.yaml selects its pods" in problem


def test_a_network_policy_admitting_every_namespace_is_reported() -> None:
    def everyone(m: Manifest) -> None:
        policy(m)["spec"]["ingress"][0]["from"] = [{"namespaceSelector": {}}]

    [problem] = network_policy_problems(PUBSUB.mutated(everyone))
    assert "admits {'namespaceSelector': {}}" in problem


def test_a_network_policy_admitting_every_source_is_reported() -> None:
    def anyone(m: Manifest) -> None:
        del policy(m)["spec"]["ingress"][0]["from"]

    [problem] = network_policy_problems(SINGLE.mutated(anyone))
    assert "admits every source" in problem


def test_a_network_policy_admitting_the_worker_port_is_reported() -> None:
    def worker(m: Manifest) -> None:
        policy(m)["spec"]["ingress"][0]["ports"] = [{"port": "worker-health"}]

    [problem] = network_policy_problems(SQS.mutated(worker))
    assert "admits port 'worker-health' (8081), not the proxy's MIRRORGATE_LISTEN port 8080" in (
        problem)


def test_a_network_policy_without_ingress_in_its_types_is_reported() -> None:
    def egress(m: Manifest) -> None:
        policy(m)["spec"]["policyTypes"] = ["Egress"]

    [problem] = network_policy_problems(SINGLE.mutated(egress))
    assert "restricts nothing" in problem


def drop_env(name: str) -> Any:
    def edit(m: Manifest) -> None:
        spec = container(m)
        spec["env"] = [item for item in spec["env"] if item["name"] != name]
    return edit


def test_a_proxy_without_a_public_url_is_reported() -> None:
    [problem] = client_access_problems(SINGLE.mutated(drop_env("MIRRORGATE_PUBLIC_URL")))
    assert "sets no MIRRORGATE_PUBLIC_URL" in problem


def test_a_proxy_without_client_tokens_is_reported() -> None:
    [problem] = client_access_problems(SQS.mutated(drop_env("MIRRORGATE_CLIENT_TOKENS_FILE")))
    assert "sets no MIRRORGATE_CLIENT_TOKENS_FILE" in problem


def test_client_tokens_read_from_the_rules_configmap_are_reported() -> None:
    [problem] = client_access_problems(PUBSUB.mutated(lambda m: set_env(
        container(m, "proxy"), "MIRRORGATE_CLIENT_TOKENS_FILE", "/etc/mirrorgate/tokens")))
    assert "is not on a Secret's mount" in problem


def test_a_client_tokens_secret_that_is_not_optional_is_reported() -> None:
    def required(m: Manifest) -> None:
        volume = next(v for v in pod(m)["volumes"] if v["name"] == "client-tokens")
        del volume["secret"]["optional"]

    [problem] = client_access_problems(SINGLE.mutated(required))
    assert "'mirrorgate-client-tokens' is not optional" in problem


def test_trusting_every_address_for_forwarded_headers_is_reported() -> None:
    [problem] = client_access_problems(SINGLE.mutated(lambda m: set_env(
        container(m), "MIRRORGATE_TRUSTED_PROXIES", "10.0.0.0/8, 0.0.0.0/0")))
    assert "trusts every address (0.0.0.0/0)" in problem
