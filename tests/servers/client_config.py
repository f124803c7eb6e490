"""Each package manager's project configuration for mirrorgate, as templates.

The drivers (`tests.servers.package_managers`) write these files into every test project, and
the README's "Clients" section shows the same text rendered for an example host, which
`tests/test_readme_clients.py` checks: what the README tells a person is what the tests run.
Placeholders: `{registry}` (mirrorgate's `/npm/` URL), `{host}` (its host name), `{auth}`
(`//host:port/npm/`, npm's key for a token) and `{token}`, always a reference to the
`NPM_TOKEN` environment variable in the client's own syntax, so no file holds a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["CLIENT_CONFIGS", "DENIED_SAYS", "LOCKED_DENIED_SAYS", "TOKEN_VARIABLE", "ClientConfig",
           "render", "says"]


@dataclass(frozen=True)
class ClientConfig:
    """One file in the project: its name, and its text with the placeholders above."""

    filename: str
    template: str


NPMRC = ClientConfig(".npmrc", "registry={registry}\n{auth}:_authToken={token}\n")
"""npm, pnpm and yarn 1 all read the project's .npmrc: one file serves the three."""

CLIENT_CONFIGS: dict[str, ClientConfig] = {
    "npm": NPMRC,
    "pnpm": NPMRC,
    "yarn1": NPMRC,
    # unsafeHttpWhitelist: yarn 4 refuses plain http unless the host is listed; drop it
    # when mirrorgate is behind https.
    "yarn4": ClientConfig(".yarnrc.yml",
                          'npmRegistryServer: "{registry}"\n'
                          "unsafeHttpWhitelist:\n"
                          '  - "{host}"\n'
                          'npmAuthToken: "{token}"\n'),
    "bun": ClientConfig("bunfig.toml",
                        "[install]\n"
                        'registry = {{ url = "{registry}", token = "{token}" }}\n'),
}


TOKEN_VARIABLE = "NPM_TOKEN"  # noqa: S105 - a variable name, not a secret
TOKEN_REFERENCE = {"bun": "$" + TOKEN_VARIABLE}
"""How each client's file names an environment variable: `${VAR}` unless listed here."""


def render(client: str, registry: str) -> str:
    """The configuration text `client` reads, for mirrorgate at `registry` (ending in `/`)."""
    parts = urlsplit(registry)
    host = parts.hostname or ""
    token = TOKEN_REFERENCE.get(client, "${" + TOKEN_VARIABLE + "}")
    return CLIENT_CONFIGS[client].template.format(
        registry=registry, host=host, auth=f"//{parts.netloc}{parts.path}", token=token)


# What each client prints for a denied version, as the client matrix sees it and the README
# shows it. `{package}`, `{version}`, `{rule}`, `{url}` (the tarball's URL) are filled in.
DENIED_SAYS: dict[str, str] = {
    # no lockfile: the version is missing from the packument; only npm reads
    # `policyRestrictions`, the others only see that no version matches
    "npm": "mirrorgate admission rules for {package}: {version} denied by {rule}",
    "pnpm": "No matching version found for {package}@{version}",
    "yarn1": "Couldn't find any versions for \"{package}\" that matches \"{version}\"",
    "yarn4": "{package}@npm:{version}: No candidates found",
    "bun": "No version matching \"{version}\" found for specifier \"{package}\" "
           "(but package exists)",
}
LOCKED_DENIED_SAYS: dict[str, str] = {
    # a lockfile names the version: the tarball answers 403; npm prints the body's `error`,
    # pnpm and yarn 4 the status line's text, yarn 1 and bun only the status code
    "npm": "GET {url} - mirrorgate denied {package}@{version} by its {rule} rule",
    "pnpm": "GET {url}: Forbidden: mirrorgate denied {package}@{version} ({rule} rule) - 403",
    "yarn1": "{url}: Request failed \"403 Forbidden\"",
    "yarn4": "Response Code: 403 (Forbidden: mirrorgate denied {package}@{version} ({rule} "
             "rule))",
    "bun": "GET {url} - 403",
}


def says(template: str, registry: str, package: str, version: str, rule: str) -> str:
    """A `DENIED_SAYS` or `LOCKED_DENIED_SAYS` line for an unscoped `package`@`version`."""
    url = f"{registry}{package}/-/{package}-{version}.tgz"
    return template.format(package=package, version=version, rule=rule, url=url)
