"""Checks that the manifests say only what the code understands.

Each check takes a `Manifest` and returns its problems as sentences naming the file, the
Deployment and the container (an empty list is a pass), so a test on a mutated copy can assert
that exactly this drift is reported. The code side is always read from the code itself:
`config.VARIABLES` and `config.load_settings`, the routes `healthz.add_health_routes`
registers, `rules.load_rules`, and the argparse parser of `mirrorgate.__main__`. Decisions:

- Schemas: `kubernetes-validate`, strict (an unknown field is an error, so a misspelled key
  cannot be silently dropped by the API server), against one pinned Kubernetes version whose
  schemas ship inside the package, so the check runs offline.
- Variables: the names `config.VARIABLES` declares, plus a short explicit list the cloud SDKs
  read (the same three `mirrorgate --help` names). Anything else is drift or a typo.
- Values: each container's environment is run through the real `load_settings`. Paths under a
  volume mount are first swapped for temporary files made from what the volume holds: a
  ConfigMap's data from the same file, a placeholder for a Secret (which never lives in git;
  a client tokens file gets a line for that placeholder, so it parses),
  an empty directory for an emptyDir. npm is not in the image, so no registry is guessed from
  it: the manifest must name the public upstream.
- Memory: a proxy whose private upstream is a registry keeps what it learned (first-party
  names, withdrawals) in the state store: PostgreSQL when MIRRORGATE_DATABASE_URL is set (a
  or its _FILE, a mounted Secret), else SQLite under MIRRORGATE_DATA_DIR, which must then be on a
  volume that outlives the pod (a claim, or a StatefulSet's claim template): an emptyDir dies
  with the pod and the root filesystem is read-only (where `Settings.warnings` says so).
- Grace: the pod must outlive the longest stop a container can take: its preStop sleep, the
  drain timeout, and `STOP_ALLOWANCE` for what follows the drain in `process.py` (a stuck
  worker gets 5 s more, then the queue flushes its send buffer and its pending acks).
"""

from __future__ import annotations

import difflib
import ipaddress
from pathlib import Path
from typing import Any

import kubernetes_validate
from aiohttp import web

from mirrorgate.access.tokens import token_line
from mirrorgate.config import VARIABLES, ConfigError, Settings, load_settings
from mirrorgate.healthz import Health, add_health_routes
from mirrorgate.metrics import Metrics
from mirrorgate.rules import RulesError, load_rules
from tests.deploy.kube import Container, Manifest, Workload, parse_command, workloads

__all__ = [
    "KUBERNETES_VERSION",
    "LIVENESS_PATH",
    "READINESS_PATH",
    "SDK_VARIABLES",
    "STOP_ALLOWANCE",
    "command_problems",
    "container_environ",
    "container_settings",
    "env_name_problems",
    "grace_problems",
    "health_paths",
    "memory_problems",
    "probe_problems",
    "schema_problems",
    "settings_problems",
]

KUBERNETES_VERSION = "1.32"
"""The oldest Kubernetes the manifests promise to work on (the preStop `sleep` action is
enabled by default from 1.30)."""

SDK_VARIABLES = frozenset({"AWS_REGION", "AWS_ENDPOINT_URL_SQS", "PUBSUB_EMULATOR_HOST"})
"""Read by aiobotocore and google-cloud-pubsub, not by config.py; kept short on purpose."""

KNOWN_VARIABLES = frozenset(var.name for var in VARIABLES) | SDK_VARIABLES
LIVENESS_PATH = "/livez"
READINESS_PATH = "/readyz"
STOP_ALLOWANCE = 15.0
"""Seconds after the drain timeout: process.py's 5 s guard on a stuck worker, then the queue's
close, which flushes its send buffer and its pending acks (each bounded at 5 s)."""

# Written into the stand-in for the operator's Secret; it is no credential, and it is long
# enough for any Secret mirrorgate reads (a job key needs 32 characters).
SECRET_PLACEHOLDER = "deploy-check-placeholder-secret-of-40-chars"  # noqa: S105
SECRET_PLACEHOLDERS = {"tokens": token_line("deploy-check", SECRET_PLACEHOLDER) + "\n",
                       "url": f"postgresql://mirrorgate:{SECRET_PLACEHOLDER}@db.invalid/mg\n"}
"""Secret keys whose stand-in must parse: the client tokens file (a line for the placeholder),
the database URL."""


def schema_problems(manifest: Manifest, version: str = KUBERNETES_VERSION) -> list[str]:
    problems = []
    for doc in manifest.documents:
        what = f"{manifest.name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            problems.append(f"{what}: {path}: {error.message} (Kubernetes {version})")
        except kubernetes_validate.SchemaNotFoundError as error:
            problems.append(f"{what}: {error.message}")
    return problems


def env_name_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        for container in workload.containers:
            if container.spec.get("envFrom"):
                problems.append(f"{container.where}: uses envFrom, which hides the variables "
                                "from these checks; list each one under env")
            for item in container.spec.get("env", []):
                name = str(item.get("name"))
                if "value" not in item:
                    problems.append(f"{container.where}: sets {name} through valueFrom, which "
                                    "these checks cannot read; give it a literal value (a "
                                    "secret goes in a mounted file, e.g. "
                                    "MIRRORGATE_PRIVATE_TOKEN_FILE)")
                if name not in KNOWN_VARIABLES:
                    close = difflib.get_close_matches(name, sorted(KNOWN_VARIABLES), n=1)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    problems.append(f"{container.where}: sets {name}, which mirrorgate never "
                                    f"reads{hint}")
    return problems


def _no_npm() -> None:
    """npm is not installed in the image: the public upstream must be set explicitly."""
    return None


def _mount_for(container: Container, path: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = None
    for mount in container.mounts():
        root = str(mount.get("mountPath", "")).rstrip("/")
        if root and (path == root or path.startswith(root + "/")) and (
                found is None or len(root) > len(str(found["mountPath"]).rstrip("/"))):
            found = mount
    return found


def _materialise(container: Container, path: str, scratch: Path) -> tuple[str, list[str]]:
    """`path` as the container would see it, rebuilt under `scratch` from the pod's volumes.

    Writable mounts land under scratch/writable, read-only ones under scratch/readonly; a path
    under no mount is left as is (it is on the image's read-only root filesystem).
    """
    mount = _mount_for(container, path)
    if mount is None:
        return path, []
    workload = container.workload
    volume = workload.volume(str(mount.get("name")))
    if volume is None:
        return path, [f"{container.where}: mounts volume {mount.get('name')!r}, which the pod "
                      "does not declare"]
    root = str(mount["mountPath"]).rstrip("/")
    inside = path[len(root):].lstrip("/")
    writable = not mount.get("readOnly", False) and (
        "emptyDir" in volume or "persistentVolumeClaim" in volume)
    local = scratch / ("writable" if writable else "readonly") / path.lstrip("/")
    if writable:
        local.mkdir(parents=True, exist_ok=True)
        return str(local), []
    files: dict[str, str] = {}
    if "configMap" in volume:
        name = str(volume["configMap"].get("name"))
        config_map = workload.manifest.named("ConfigMap", name)
        if config_map is None:
            return path, [f"{container.where}: mounts ConfigMap {name!r}, which is not in "
                          f"{workload.manifest.name}"]
        data = {str(k): str(v) for k, v in config_map.get("data", {}).items()}
        items = volume["configMap"].get("items")
        files = ({str(i["path"]): data.get(str(i["key"]), "") for i in items} if items
                 else data)
    elif "secret" in volume:
        items = volume["secret"].get("items")
        # The Secret is created by the operator, never committed: any key may exist.
        keys = {str(i["path"]): str(i["key"]) for i in items} if items else {
            inside or "token": inside or "token"}
        files = {path: SECRET_PLACEHOLDERS.get(key, SECRET_PLACEHOLDER)
                 for path, key in keys.items()}
    base = scratch / "readonly" / root.lstrip("/")
    for relative, text in files.items():
        target = base / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    base.mkdir(parents=True, exist_ok=True)
    return str(local), []


def container_environ(container: Container, scratch: Path) -> tuple[dict[str, str], list[str]]:
    """The container's env with every path under a volume mount rebuilt under `scratch`."""
    problems: list[str] = []
    environ: dict[str, str] = {}
    for name, value in container.env().items():
        scheme = "file://" if value.startswith("file:///") else ""
        if value.startswith("/") or scheme:
            path, found = _materialise(container, value.removeprefix(scheme), scratch)
            problems.extend(found)
            value = scheme + path
        environ[name] = value
    return environ, problems


def container_settings(container: Container,
                       scratch: Path) -> tuple[Settings | None, list[str]]:
    """The settings `load_settings` builds from the container's env, or its problems."""
    environ, problems = container_environ(container, scratch)
    try:
        settings = load_settings(environ, npm_registry=_no_npm)
    except ConfigError as error:
        return None, problems + [f"{container.where}: {problem}" for problem in error.problems]
    return settings, problems


def settings_problems(manifest: Manifest, scratch: Path) -> list[str]:
    problems = []
    scratch = scratch.resolve()
    for workload in workloads(manifest):
        for container in workload.containers:
            where = scratch / workload.name / container.name
            settings, found = container_settings(container, where)
            problems.extend(found)
            if settings is None:
                continue
            if settings.rules_file is not None:
                try:
                    load_rules(settings.rules_file)
                except RulesError as error:
                    problems.append(f"{container.where}: the rules file does not load: {error}")
            for url in dict.fromkeys((settings.private_upstream, settings.mirror_target)):
                store = Path(url.removeprefix("file://"))
                if url.startswith("file://") and not store.is_relative_to(where / "writable"):
                    problems.append(f"{container.where}: the embedded file store at {store} "
                                    "is on the read-only root filesystem; set "
                                    "MIRRORGATE_DATA_DIR to a writable volume's mount path")
    return problems


def memory_problems(manifest: Manifest, scratch: Path) -> list[str]:
    """Every proxy container over a registry keeps its data directory on a volume that
    persists."""
    problems = []
    scratch = scratch.resolve()
    for workload in workloads(manifest):
        for container in workload.containers:
            parsed = parse_command(container)
            if isinstance(parsed, str) or parsed.command != "serve":
                continue
            settings, _found = container_settings(
                container, scratch / workload.name / container.name)
            if settings is None or settings.private_upstream.startswith("file://"):
                continue
            if settings.database_url is not None:
                continue  # the state store is PostgreSQL: nothing is kept in the pod
            # the path as the pod sees it (the settings hold its stand-in under scratch)
            data_dir = container.env().get("MIRRORGATE_DATA_DIR", "$HOME/.local/share")
            mount = _mount_for(container, data_dir)
            volume = (workload.volume(str(mount.get("name"))) if mount is not None
                      else None)
            if volume is None or "persistentVolumeClaim" not in volume:
                kind = ("the read-only root filesystem" if volume is None
                        else "a volume that dies with the pod")
                problems.append(
                    f"{container.where}: MIRRORGATE_DATA_DIR ({data_dir}) is on "
                    f"{kind}, so the state store there (first-party names, withdrawals) "
                    "is lost at every restart; mount a persistent volume there (a "
                    "StatefulSet's volumeClaimTemplates), or keep the state in PostgreSQL "
                    "(MIRRORGATE_DATABASE_URL from a Secret)")
    return problems


def health_paths() -> frozenset[str]:
    """The paths the health listener serves, read from the routes healthz.py registers."""
    app = web.Application()
    add_health_routes(app, Health(), Metrics())
    return frozenset(resource.canonical for resource in app.router.resources())


def _listener(container: Container, command: str) -> tuple[str, str, int] | None:
    variable = "MIRRORGATE_LISTEN" if command == "serve" else "MIRRORGATE_WORKER_LISTEN"
    host, _, port = (container.setting(variable) or "").rpartition(":")
    if not port.isdigit():
        return None
    return variable, host.strip("[]"), int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def probe_problems(manifest: Manifest) -> list[str]:
    served = health_paths()
    problems = [f"healthz.py serves no {path}; the probes need it"
                for path in (LIVENESS_PATH, READINESS_PATH) if path not in served]
    for workload in workloads(manifest):
        for container in workload.containers:
            args = parse_command(container)
            if isinstance(args, str):
                continue  # command_problems reports it
            listener = _listener(container, args.command)
            if listener is None:
                problems.append(f"{container.where}: its listener is not host:port")
                continue
            variable, host, port = listener
            if _loopback(host):
                problems.append(f"{container.where}: {variable} listens on {host}, where the "
                                "kubelet's probes cannot reach it; listen on 0.0.0.0")
            declared = [int(p["containerPort"]) for p in container.spec.get("ports", [])]
            if port not in declared:
                problems.append(f"{container.where}: declares no containerPort {port}, the port "
                                f"of {variable}")
            for field, path in (("livenessProbe", LIVENESS_PATH),
                                ("readinessProbe", READINESS_PATH)):
                problems.extend(_probe(container, field, path, served, variable, port))
    return problems


def _probe(container: Container, field: str, path: str, served: frozenset[str],
           variable: str, port: int) -> list[str]:
    probe = container.spec.get(field)
    if probe is None:
        return [f"{container.where}: has no {field}"]
    http = probe.get("httpGet")
    if http is None:
        return [f"{container.where}: {field} is not an httpGet on {path}"]
    found = []
    if http.get("path") != path or http.get("path") not in served:
        found.append(f"{container.where}: {field} asks for {http.get('path')!r}; the process "
                     f"serves {path} for it (healthz.py serves {', '.join(sorted(served))})")
    target = container.resolve_port(http.get("port", ""))
    if target is None:
        found.append(f"{container.where}: {field} names port {http.get('port')!r}, which the "
                     f"container does not declare; {variable} puts the listener on {port}")
    elif target != port:
        found.append(f"{container.where}: {field} probes port {http.get('port')!r} "
                     f"({target}), but {variable} puts the listener on {port}")
    return found


def _prestop_seconds(container: Container) -> tuple[float, str | None]:
    hook = container.spec.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0.0, None
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"]), None
    return 0.0, (f"{container.where}: its preStop hook is not a `sleep`, so its length cannot "
                 "be counted against terminationGracePeriodSeconds")


def grace_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        grace = float(workload.pod.get("terminationGracePeriodSeconds", 30))
        for container in workload.containers:
            prestop, problem = _prestop_seconds(container)
            if problem:
                problems.append(problem)
            try:
                drain = float(container.setting("MIRRORGATE_DRAIN_TIMEOUT") or "")
            except ValueError:
                continue  # settings_problems reports the bad value
            needed = prestop + drain + STOP_ALLOWANCE
            if grace <= needed:
                problems.append(
                    f"{container.where}: terminationGracePeriodSeconds is {grace:g} s, but a "
                    f"stop can take {needed:g} s (preStop {prestop:g} + "
                    f"MIRRORGATE_DRAIN_TIMEOUT {drain:g} + {STOP_ALLOWANCE:g} for the worker's "
                    "stop guard and the queue's close); raise it above that")
    return problems


_QUEUE_ADDRESS = ("MIRROR_QUEUE_PROVIDER", "MIRROR_SQS_QUEUE_URL", "MIRROR_PUBSUB_TOPIC",
                  "MIRROR_PUBSUB_SUBSCRIPTION")


def command_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload in workloads(manifest):
        problems.extend(_pod_commands(workload))
    return problems


def _pod_commands(workload: Workload) -> list[str]:
    problems = []
    queues: dict[tuple[str | None, ...], list[str]] = {}
    for container in workload.containers:
        args = parse_command(container)
        if isinstance(args, str):
            problems.append(f"{container.where}: {args}")
            continue
        if args.command not in ("serve", "worker"):
            problems.append(f"{container.where}: runs `mirrorgate {args.command}`, which exits "
                            "at once; a Deployment's container runs `serve` or `worker`")
            continue
        provider = (container.setting("MIRROR_QUEUE_PROVIDER") or "").lower()
        separate = args.command == "worker" or getattr(args, "no_worker", False)
        if separate and provider == "memory":
            shown = " ".join(str(arg) for arg in container.spec.get("args", []))
            problems.append(f"{container.where}: runs `mirrorgate {shown}` on "
                            "MIRROR_QUEUE_PROVIDER=memory, which process.py refuses: an "
                            "in-memory queue cannot cross processes")
        if provider != "memory":
            address = tuple(container.setting(name) for name in _QUEUE_ADDRESS)
            queues.setdefault(address, []).append(container.name)
    if len(queues) > 1:
        problems.append(f"{workload.where}: its containers use different queues "
                        f"({'; '.join(', '.join(names) for names in queues.values())}); the "
                        "proxy and its worker must share one")
    return problems
