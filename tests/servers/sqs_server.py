"""Placeholder: filled in by the change that adds these fixtures."""
