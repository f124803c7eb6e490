"""Checks of what the deployment issue asks every manifest to hold, beyond agreeing with the code.

Hardening (non-root, read-only root filesystem with a writable /tmp, no capabilities, no
privilege escalation, seccomp RuntimeDefault), resources sized from the measured figures, a
Service and a PodDisruptionBudget that really select the proxy, and the cloud identity each
queue backend needs. Same contract as `drift.py`: a `Manifest` in, sentences naming what is
wrong out. Decisions:

- The memory limit is checked against a floor built from the settings the container runs with
  (`memory_floor`), so raising MIRRORGATE_CACHE_MAX_BYTES or the queue depth without raising
  the limit is reported. The figures: about 70 MB of RSS once mirrorgate, aiohttp and a cloud
  SDK are imported (rounded up to `BASELINE`); about 2 KiB per queued job (bench/queue_memory.py
  measured about 20 MB for the 10,000-job cap); the packument cache at its byte cap (it counts
  the serialised versions it keeps, so its cap is close to its cost); one packument body at
  MIRRORGATE_MAX_METADATA_BYTES being read and parsed beside it (`METADATA_COPIES`: the bytes
  plus about 4.2 times them once parsed, measured with tracemalloc on a 500-version
  packument); and, where a worker runs, each tarball in flight held twice at its peak (the
  downloaded chunks and the joined bytes; the publish body is streamed, base64 chunk by
  chunk: `TARBALL_COPIES`).
  It is a floor to catch drift, not a promise that the process never grows past it.
- Identity is checked on the ServiceAccount the pod names, in the same file: an IRSA role ARN
  for sqs, a Workload Identity Google service account for pubsub.
"""

from __future__ import annotations

import re

from tests.deploy.kube import Container, Manifest, Workload, parse_command, workloads
from tests.deploy.quantities import cpu_millis, memory_bytes

__all__ = [
    "BASELINE",
    "METADATA_COPIES",
    "PER_QUEUED_JOB",
    "TARBALL_COPIES",
    "disruption_problems",
    "identity_problems",
    "memory_floor",
    "resource_problems",
    "security_problems",
    "service_problems",
]

MIB = 1024 * 1024
BASELINE = 128 * MIB
PER_QUEUED_JOB = 2 * 1024
METADATA_COPIES = 5
TARBALL_COPIES = 2

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
IRSA_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"
# The container's /tmp mount path, named to be checked; no temporary file is made here.
TMP = "/tmp"  # noqa: S108
GOOGLE_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]+"
                                    r"\.iam\.gserviceaccount\.com$")


def security_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        pod = workload.pod.get("securityContext", {})
        if pod.get("runAsNonRoot") is not True:
            problems.append(f"{workload.where}: the pod does not set runAsNonRoot: true")
        user = pod.get("runAsUser")
        if not isinstance(user, int) or user <= 0:
            problems.append(f"{workload.where}: the pod's runAsUser is {user!r}; set the image's "
                            "numeric non-root user (10001)")
        for container in workload.containers:
            problems.extend(_container_security(container, pod))
    return problems


def _container_security(container: Container, pod: dict[str, object]) -> list[str]:
    problems = []
    context = container.spec.get("securityContext", {})
    seccomp = context.get("seccompProfile") or pod.get("seccompProfile") or {}
    if not isinstance(seccomp, dict) or seccomp.get("type") != "RuntimeDefault":
        problems.append(f"{container.where}: seccompProfile is not RuntimeDefault")
    if context.get("runAsNonRoot") is False:
        problems.append(f"{container.where}: sets runAsNonRoot: false")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{container.where}: does not set allowPrivilegeEscalation: false")
    if context.get("privileged"):
        problems.append(f"{container.where}: runs privileged")
    if context.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{container.where}: does not set readOnlyRootFilesystem: true")
    capabilities = context.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        problems.append(f"{container.where}: does not drop ALL capabilities")
    if capabilities.get("add"):
        problems.append(f"{container.where}: adds capabilities {capabilities['add']!r}")
    tmp = [m for m in container.mounts() if str(m.get("mountPath", "")).rstrip("/") == TMP]
    volume = container.workload.volume(str(tmp[0].get("name"))) if tmp else None
    if volume is None or "emptyDir" not in volume or tmp[0].get("readOnly"):
        problems.append(f"{container.where}: has no writable emptyDir at /tmp, the one place "
                        "a process on a read-only root filesystem can write temporary files")
    return problems


def _number(container: Container, name: str) -> int:
    text = container.setting(name) or "0"
    return int(text) if text.isdigit() else 0


def memory_floor(container: Container) -> int | None:
    """The least memory the container's settings need, or None when it runs no mirrorgate."""
    args = parse_command(container)
    if isinstance(args, str):
        return None
    floor = BASELINE + _number(container, "MIRROR_QUEUE_MAX_DEPTH") * PER_QUEUED_JOB
    if args.command == "serve":
        floor += _number(container, "MIRRORGATE_CACHE_MAX_BYTES")
        floor += METADATA_COPIES * _number(container, "MIRRORGATE_MAX_METADATA_BYTES")
    if args.command == "worker" or not getattr(args, "no_worker", False):
        floor += (TARBALL_COPIES * _number(container, "MIRRORGATE_MAX_TARBALL_BYTES")
                  * max(1, _number(container, "MIRRORGATE_WORKER_CONCURRENCY")))
    return floor


def resource_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        for container in workload.containers:
            problems.extend(_container_resources(container))
    return problems


def _container_resources(container: Container) -> list[str]:
    resources = container.spec.get("resources", {})
    amounts: dict[tuple[str, str], int] = {}
    problems = []
    for kind in ("requests", "limits"):
        for resource, parse in (("cpu", cpu_millis), ("memory", memory_bytes)):
            value = resources.get(kind, {}).get(resource)
            if value is None:
                problems.append(f"{container.where}: sets no {resource} {kind}")
                continue
            try:
                amounts[kind, resource] = parse(value)
            except ValueError as error:
                problems.append(f"{container.where}: {resource} {kind}: {error}")
    for resource in ("cpu", "memory"):
        request, limit = amounts.get(("requests", resource)), amounts.get(("limits", resource))
        if request is not None and limit is not None and request > limit:
            problems.append(f"{container.where}: its {resource} request is above its limit")
    if not container.env().get("MIRRORGATE_CACHE_MAX_BYTES") and _runs(container, "serve"):
        problems.append(f"{container.where}: leaves MIRRORGATE_CACHE_MAX_BYTES at its default "
                        "(512 MiB); set it to fit the memory limit")
    limit = amounts.get(("limits", "memory"))
    floor = memory_floor(container)
    if limit is not None and floor is not None and limit < floor:
        problems.append(f"{container.where}: its memory limit ({limit // MIB} MiB) is below "
                        f"what its settings need ({-(-floor // MIB)} MiB: the cache, queue, a "
                        "packument and tarballs in flight); raise the limit or lower them")
    return problems


def _runs(container: Container, command: str) -> bool:
    args = parse_command(container)
    return not isinstance(args, str) and args.command == command


def _proxies(manifest: Manifest) -> list[tuple[Workload, Container]]:
    return [(workload, container) for workload in workloads(manifest)
            for container in workload.containers if _runs(container, "serve")]


def service_problems(manifest: Manifest) -> list[str]:
    problems = []
    services = manifest.of_kind("Service")
    for workload, container in _proxies(manifest):
        listen = (container.setting("MIRRORGATE_LISTEN") or "").rpartition(":")[2]
        chosen = [s for s in services if workload.selected_by(s["spec"].get("selector", {}))]
        if not chosen:
            problems.append(f"{workload.where}: no Service in {manifest.name} selects its pods")
        for service in chosen:
            for port in service["spec"].get("ports", []):
                target = workload.resolve_port(port.get("targetPort", port.get("port")))
                if str(target) != listen:
                    problems.append(f"{manifest.name} Service/{service['metadata']['name']}: "
                                    f"port {port.get('name', port.get('port'))} targets "
                                    f"{port.get('targetPort')!r} ({target}), not the proxy's "
                                    f"MIRRORGATE_LISTEN port {listen}")
    return problems


def disruption_problems(manifest: Manifest) -> list[str]:
    problems = []
    budgets = manifest.of_kind("PodDisruptionBudget")
    for workload, _container in _proxies(manifest):
        chosen = [b for b in budgets
                  if workload.selected_by(b["spec"].get("selector", {}).get("matchLabels", {}))]
        if not chosen:
            problems.append(f"{workload.where}: no PodDisruptionBudget in {manifest.name} "
                            "selects its pods")
        replicas = int(workload.deployment["spec"].get("replicas", 1))
        for budget in chosen:
            spec = budget["spec"]
            name = f"{manifest.name} PodDisruptionBudget/{budget['metadata']['name']}"
            minimum = spec.get("minAvailable")
            if isinstance(minimum, int) and minimum >= replicas:
                problems.append(f"{name}: minAvailable {minimum} with {replicas} replicas "
                                "blocks every node drain")
            if spec.get("maxUnavailable") in (0, "0%"):
                problems.append(f"{name}: maxUnavailable 0 blocks every node drain")
            if replicas < 2:
                problems.append(f"{workload.where}: {replicas} replica cannot keep the proxy "
                                "up through a disruption")
    return problems


def identity_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        providers = {(c.setting("MIRROR_QUEUE_PROVIDER") or "").lower()
                     for c in workload.containers}
        account_name = workload.pod.get("serviceAccountName")
        account = manifest.named("ServiceAccount", str(account_name)) if account_name else None
        annotations = (account or {}).get("metadata", {}).get("annotations", {})
        for provider, key, pattern in (
            ("sqs", IRSA_ANNOTATION, IRSA_ROLE),
            ("pubsub", WORKLOAD_IDENTITY_ANNOTATION, GOOGLE_SERVICE_ACCOUNT),
        ):
            if provider not in providers:
                continue
            if account is None:
                problems.append(f"{workload.where}: uses {provider} but its serviceAccountName "
                                f"({account_name!r}) is no ServiceAccount in {manifest.name}")
            elif not pattern.match(str(annotations.get(key, ""))):
                problems.append(f"{workload.where}: uses {provider}, but ServiceAccount/"
                                f"{account_name} has no valid {key} annotation "
                                f"(found {annotations.get(key)!r})")
    return problems
