"""Checks of who may reach a manifest's proxy: its NetworkPolicy, client tokens and public URL.

Same contract as `drift.py` and `posture.py`: a `Manifest` in, sentences naming what is wrong
out. Every pod running `mirrorgate serve` must be selected by a NetworkPolicy whose every
ingress rule admits only namespaces labelled `CLIENT_LABEL` (the label docs/deployment.md names) and
only the proxy's `MIRRORGATE_LISTEN` port; its proxy container must read the client tokens file
from an optional Secret, and set `MIRRORGATE_PUBLIC_URL`, so tarball URLs never come from a
client's headers.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.deploy.kube import Container, Manifest, Workload, parse_command, workloads

__all__ = ["CLIENT_LABEL", "client_access_problems", "network_policy_problems"]

CLIENT_LABEL = {"mirrorgate-client": "true"}
"""The namespace label docs/deployment.md tells operators to set on client namespaces."""


def _proxies(manifest: Manifest) -> list[tuple[Workload, Container]]:
    found = []
    for workload in workloads(manifest):
        for container in workload.containers:
            args = parse_command(container)
            if not isinstance(args, str) and args.command == "serve":
                found.append((workload, container))
    return found


def _listen_port(container: Container) -> int | None:
    port = (container.setting("MIRRORGATE_LISTEN") or "").rpartition(":")[2]
    return int(port) if port.isdigit() else None


def network_policy_problems(manifest: Manifest) -> list[str]:
    problems = []
    policies = manifest.of_kind("NetworkPolicy")
    for workload, container in _proxies(manifest):
        chosen = [p for p in policies if workload.selected_by(
            p["spec"].get("podSelector", {}).get("matchLabels", {}))]
        if not chosen:
            problems.append(f"{workload.where}: no NetworkPolicy in {manifest.name} selects "
                            "its pods, so anyone who can reach the cluster network reaches "
                            "the proxy")
        for policy in chosen:
            problems.extend(_policy(manifest, workload, container, policy))
    return problems


def _policy(manifest: Manifest, workload: Workload, container: Container,
            policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    name = f"{manifest.name} NetworkPolicy/{policy['metadata']['name']}"
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        return [f"{name}: does not list Ingress in policyTypes, so it restricts nothing"]
    problems = []
    listen = _listen_port(container)
    for index, rule in enumerate(spec.get("ingress", [])):
        where = f"{name}: ingress rule {index + 1}"
        peers = rule.get("from") or []
        if not peers:
            problems.append(f"{where} admits every source; admit namespaces labelled "
                            f"{_label()} only")
        for peer in peers:
            selector = peer.get("namespaceSelector")
            if set(peer) != {"namespaceSelector"} or selector != {"matchLabels": CLIENT_LABEL}:
                problems.append(f"{where} admits {peer!r}; admit namespaces labelled "
                                f"{_label()} only")
        ports = rule.get("ports") or []
        if not ports:
            problems.append(f"{where} admits every port; admit the proxy's port {listen} only")
        for port in ports:
            number = workload.resolve_port(port.get("port", ""))
            if number != listen:
                problems.append(f"{where} admits port {port.get('port')!r} ({number}), not "
                                f"the proxy's MIRRORGATE_LISTEN port {listen}")
    return problems


def _label() -> str:
    return ", ".join(f"{key}={value}" for key, value in CLIENT_LABEL.items())


def client_access_problems(manifest: Manifest) -> list[str]:
    problems = []
    for workload, container in _proxies(manifest):
        if not container.setting("MIRRORGATE_PUBLIC_URL"):
            problems.append(f"{container.where}: sets no MIRRORGATE_PUBLIC_URL, so tarball URLs "
                            "are built from each client's Host header")
        for network in (container.setting("MIRRORGATE_TRUSTED_PROXIES") or "").replace(
                ",", " ").split():
            if ipaddress.ip_network(network, strict=False).prefixlen == 0:
                problems.append(f"{container.where}: MIRRORGATE_TRUSTED_PROXIES trusts every "
                                f"address ({network}); list the ingress's addresses only")
        problems.extend(_tokens_mount(workload, container))
    return problems


def _tokens_mount(workload: Workload, container: Container) -> list[str]:
    path = container.env().get("MIRRORGATE_CLIENT_TOKENS_FILE")
    if not path:
        return [f"{container.where}: sets no MIRRORGATE_CLIENT_TOKENS_FILE; wire in the "
                "client tokens Secret"]
    for mount in container.mounts():
        root = str(mount.get("mountPath", "")).rstrip("/")
        if not root or not path.startswith(root + "/"):
            continue
        volume = workload.volume(str(mount.get("name"))) or {}
        secret = volume.get("secret")
        if secret is None:
            return [f"{container.where}: MIRRORGATE_CLIENT_TOKENS_FILE {path} is not on a "
                    "Secret's mount"]
        if secret.get("optional") is not True:
            return [f"{container.where}: the client tokens Secret "
                    f"{secret.get('secretName')!r} is not optional: a pod without it would "
                    "stay in ContainerCreating instead of saying what is missing"]
        return []
    return [f"{container.where}: MIRRORGATE_CLIENT_TOKENS_FILE {path} is under no volume mount"]
