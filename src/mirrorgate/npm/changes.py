"""What npm's packument-changing writes may change: deprecation messages, versions removed,
and dist-tags, nothing else: a client allowed to deprecate cannot rewrite a published
version's manifest (its `dist`, its tarball URL), whatever the private registry would accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorgate.npm.upload import UploadError

__all__ = ["changed_packument"]


# `npm deprecate` and `npm unpublish <name>@<version>` read the packument (`?write=true`),
# edit it and PUT it back whole. That document is never forwarded: the change is rebuilt
# from the private side's own packument, taking from the client only each version's
# `deprecated` message, which versions are gone, and tags naming versions that remain.
def changed_packument(current: Mapping[str, Any], incoming: Mapping[str, Any]) -> dict[str, Any]:
    """The private packument `current` with `incoming`'s deprecations, removals and tags;
    raises UploadError when `incoming` adds a version or is not a packument."""
    versions, wanted = current.get("versions"), incoming.get("versions")
    if not isinstance(versions, Mapping) or not isinstance(wanted, Mapping):
        raise UploadError("the change must be a packument with versions, as npm deprecate and "
                          "npm unpublish send it")
    added = sorted(set(wanted) - set(versions))
    if added:
        raise UploadError(f"a change cannot add versions ({', '.join(added[:5])[:200]}); "
                          "publish them with npm publish")
    kept: dict[str, Any] = {}
    for version, manifest in versions.items():
        if version not in wanted:
            continue  # unpublished
        change = wanted[version]
        copy = dict(manifest) if isinstance(manifest, Mapping) else manifest
        if isinstance(change, Mapping) and "deprecated" in change and isinstance(copy, dict):
            message = change["deprecated"]
            if not isinstance(message, str):
                raise UploadError(f"the deprecation of {version[:100]} is not a string")
            copy["deprecated"] = message  # "" un-deprecates: registries drop it then
        kept[version] = copy
    tags: Any = incoming.get("dist-tags")
    if not isinstance(tags, Mapping):
        tags = current.get("dist-tags")
    if not isinstance(tags, Mapping):
        tags = {}
    document = {key: value for key, value in current.items() if key != "_attachments"}
    document["versions"] = kept
    document["dist-tags"] = {tag: version for tag, version in tags.items()
                             if isinstance(tag, str) and isinstance(version, str)
                             and version in kept}
    return document
