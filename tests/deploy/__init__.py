"""Checks that keep the container image and the Kubernetes manifests in step with the code."""
