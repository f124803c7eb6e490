"""The registries mirrorgate talks to: one HTTP client per upstream, the origin lock, the sources.

Everything that opens a connection to a registry (or reads the embedded file store) lives here.
"""
