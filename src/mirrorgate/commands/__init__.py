"""Operator commands run from a shell or a CI step: `check` (would the gate refuse what a
lockfile pins?), `prewarm` and `audit`. They share the lockfile readers (`lockfiles`), the
output (`report`: progress, summary table, `--json`, exit codes) and the proxy's own rules,
upstream client and queue; nothing here decides admission by itself.
"""
