"""The Kubernetes manifests under deploy/kubernetes/, loaded for the deploy checks.

A manifest file is a list of documents. The checks walk its workloads' (Deployments' and
StatefulSets') pod templates one
container at a time and look up the ConfigMaps, ServiceAccounts, Services and
PodDisruptionBudgets beside them in the same file (each file is a complete shape). Every
check takes a `Manifest`, so a test can hand it a mutated deep copy of a real one and see the
drift reported. Decisions:

- YAML is read with `yaml.safe_load_all` and nothing else: no custom tags, no loader state
  shared with other libraries.
- A container's mirrorgate command is read with the real argparse parser of
  `mirrorgate.__main__`; the image's ENTRYPOINT is `mirrorgate`, so `args` is the command line.
- A container's environment is what its `env` list sets literally. `envFrom` and `valueFrom`
  hide values from the checks, so the env check refuses them rather than guess.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mirrorgate.__main__ import _parser
from mirrorgate.config import VARIABLES

__all__ = [
    "MANIFEST_DIR",
    "REPO",
    "Container",
    "Document",
    "Manifest",
    "Workload",
    "all_manifests",
    "default_of",
    "load_manifest",
    "parse_command",
    "workloads",
]

REPO = Path(__file__).resolve().parents[2]
MANIFEST_DIR = REPO / "deploy" / "kubernetes"

Document = dict[str, Any]
_DEFAULTS = {var.name: var.default for var in VARIABLES}


def default_of(name: str) -> str | None:
    """The value mirrorgate uses when the variable is unset (`config.VARIABLES`)."""
    return _DEFAULTS.get(name)


@dataclass(frozen=True)
class Manifest:
    name: str
    documents: list[Document]

    def of_kind(self, kind: str) -> list[Document]:
        return [doc for doc in self.documents if doc.get("kind") == kind]

    def named(self, kind: str, name: str) -> Document | None:
        for doc in self.of_kind(kind):
            if doc.get("metadata", {}).get("name") == name:
                return doc
        return None

    def mutated(self, edit: Callable[[Manifest], None]) -> Manifest:
        """A deep copy of this manifest with `edit` applied to it; this one is untouched."""
        changed = Manifest(self.name, copy.deepcopy(self.documents))
        edit(changed)
        return changed


def load_manifest(path: Path) -> Manifest:
    with path.open(encoding="utf-8") as stream:
        documents = [doc for doc in yaml.safe_load_all(stream) if doc]
    return Manifest(path.name, documents)


def all_manifests() -> list[Manifest]:
    return [load_manifest(path) for path in sorted(MANIFEST_DIR.glob("*.yaml"))]


@dataclass(frozen=True)
class Container:
    """One container of a Deployment's pod template, with the lookups the checks need."""

    workload: Workload
    spec: Document

    @property
    def name(self) -> str:
        return str(self.spec.get("name", "?"))

    @property
    def where(self) -> str:
        return f"{self.workload.where} container/{self.name}"

    def env(self) -> dict[str, str]:
        """The variables `env` sets to literal values (`valueFrom` entries are left out)."""
        return {str(item["name"]): str(item["value"]) for item in self.spec.get("env", [])
                if "value" in item}

    def setting(self, name: str) -> str | None:
        """What mirrorgate reads for `name`: the container's literal value, else the default."""
        value = self.env().get(name, "").strip()
        return value or default_of(name)

    def port_named(self, name: str) -> int | None:
        for port in self.spec.get("ports", []):
            if port.get("name") == name:
                return int(port["containerPort"])
        return None

    def resolve_port(self, port: int | str) -> int | None:
        """A probe's port: a number, or the name of one of this container's ports."""
        if isinstance(port, int):
            return port
        return int(port) if port.isdigit() else self.port_named(port)

    def mounts(self) -> list[Document]:
        return list(self.spec.get("volumeMounts", []))


@dataclass(frozen=True)
class Workload:
    """A Deployment or StatefulSet and its pod template."""

    manifest: Manifest
    deployment: Document

    @property
    def name(self) -> str:
        return str(self.deployment.get("metadata", {}).get("name", "?"))

    @property
    def kind(self) -> str:
        return str(self.deployment.get("kind", "?"))

    @property
    def where(self) -> str:
        return f"{self.manifest.name} {self.kind}/{self.name}"

    @property
    def pod(self) -> Document:
        spec: Document = self.deployment["spec"]["template"]["spec"]
        return spec

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.deployment["spec"]["template"]["metadata"].get("labels", {})
        return labels

    @property
    def containers(self) -> list[Container]:
        return [Container(self, spec) for spec in self.pod.get("containers", [])]

    def volume(self, name: str) -> Document | None:
        """The pod's volume `name`; a StatefulSet's claim template reads as the claim each pod
        gets (`persistentVolumeClaim`)."""
        for volume in self.pod.get("volumes", []):
            if volume.get("name") == name:
                found: Document = volume
                return found
        for template in self.deployment["spec"].get("volumeClaimTemplates", []):
            if template.get("metadata", {}).get("name") == name:
                return {"name": name, "persistentVolumeClaim": {"claimName": name},
                        "claimTemplate": template}
        return None

    def resolve_port(self, port: int | str) -> int | None:
        """A Service's targetPort: a number, or a port name any container of the pod declares."""
        if isinstance(port, int) or port.isdigit():
            return int(port)
        found = (c.port_named(port) for c in self.containers)
        return next((number for number in found if number is not None), None)

    def selected_by(self, selector: dict[str, str]) -> bool:
        """Whether a label selector (`matchLabels` or a Service's selector) picks these pods."""
        return bool(selector) and all(self.labels.get(k) == v for k, v in selector.items())


WORKLOAD_KINDS = ("Deployment", "StatefulSet")


def workloads(manifest: Manifest) -> Iterator[Workload]:
    for kind in WORKLOAD_KINDS:
        for deployment in manifest.of_kind(kind):
            yield Workload(manifest, deployment)


def parse_command(container: Container) -> argparse.Namespace | str:
    """The container's mirrorgate command as the real parser reads it, or why it cannot be.

    `command` must be unset (the image's ENTRYPOINT, `mirrorgate`) or exactly `mirrorgate`.
    """
    command = container.spec.get("command")
    if command not in (None, ["mirrorgate"]):
        return (f"sets command {command!r}, which replaces the image's `mirrorgate` entrypoint; "
                "leave command unset and put the subcommand in args")
    args = [str(arg) for arg in container.spec.get("args", [])]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return _parser().parse_args(args)
    except SystemExit:
        reason = errors.getvalue().strip().splitlines()
        return f"args {args!r} are not a mirrorgate command: {reason[-1] if reason else '?'}"
