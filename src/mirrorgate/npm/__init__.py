"""The npm registry protocol as pure functions: names, paths, versions, packuments, publishing.

Nothing here does I/O: the serve path and the worker hand these modules documents and get
documents back, so the protocol is tested without a server.
"""
