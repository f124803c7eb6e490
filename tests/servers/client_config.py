"""Each package manager's project configuration for mirrorgate, as templates.

The drivers (`tests.servers.package_managers`) write these files into every test project, and
the "Clients" section of docs/serving.md shows the same text rendered for an example host, which
`tests/test_docs_clients.py` checks: what the docs tell a person is what the tests run.
Placeholders: `{registry}` (mirrorgate's `/npm/` URL), `{host}` (its host name), `{auth}`
(`//host:port/npm/`, npm's key for a token) and `{token}`, `${NPM_TOKEN}`: every file names
the `NPM_TOKEN` environment variable (bun as `$NPM_TOKEN`), so no file holds a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["CLIENT_CONFIGS", "CONTACT", "DENIED_SAYS", "DENIED_WAY_OUT_SAYS", "LOCKED_DENIED_SAYS",
           "LOCKED_WAY_OUT_SAYS", "TOKEN_VARIABLE", "ConfigFile", "render", "says"]


@dataclass(frozen=True)
class ConfigFile:
    """One file a client reads: where (`project` directory or the user's `home`), its name,
    and its text with the placeholders above."""

    place: Literal["project", "home"]
    filename: str
    template: str


NPMRC = ConfigFile("project", ".npmrc", "registry={registry}\n{auth}:_authToken={token}\n")

CLIENT_CONFIGS: dict[str, tuple[ConfigFile, ...]] = {
    "npm": (NPMRC,),
    # pnpm 10 ignores a token taken from an environment variable in the project's .npmrc
    # ("environment variables are not expanded in registry credentials that come from a
    # project .npmrc"): the token line goes in the user's ~/.npmrc
    "pnpm": (ConfigFile("project", ".npmrc", "registry={registry}\n"),
             ConfigFile("home", ".npmrc", "{auth}:_authToken={token}\n")),
    # yarn 1 sends the token on installs only with always-auth
    "yarn1": (ConfigFile("project", ".npmrc",
                         "registry={registry}\nalways-auth=true\n{auth}:_authToken={token}\n"),),
    # unsafeHttpWhitelist: yarn 4 refuses plain http unless the host is listed (drop it behind
    # https); npmAlwaysAuth: without it yarn 4 sends no token on installs
    "yarn4": (ConfigFile("project", ".yarnrc.yml",
                         'npmRegistryServer: "{registry}"\n'
                         "unsafeHttpWhitelist:\n"
                         '  - "{host}"\n'
                         "npmAlwaysAuth: true\n"
                         'npmAuthToken: "{token}"\n'),),
    # bun names an environment variable as $VAR
    "bun": (ConfigFile("project", "bunfig.toml",
                       "[install]\n"
                       'registry = {{ url = "{registry}", token = "$NPM_TOKEN" }}\n'),),
}

TOKEN_VARIABLE = "NPM_TOKEN"  # noqa: S105 - a variable name, not a secret


def render(file: ConfigFile, registry: str) -> str:
    """`file`'s text for mirrorgate at `registry` (ending in `/`)."""
    parts = urlsplit(registry)
    return file.template.format(registry=registry, host=parts.hostname or "",
                                auth=f"//{parts.netloc}{parts.path}",
                                token="${" + TOKEN_VARIABLE + "}")


# What each client prints for a denied version, as the client matrix sees it and the docs
# shows it. `{package}`, `{version}`, `{rule}`, `{url}` (the tarball's URL), `{admitted}` (the
# admitted version to use instead), `{contact}` (MIRRORGATE_OPERATOR_CONTACT) and `{named}` (the
# rule as the status line names it: `deny-list rule`, `license rule: GPL-3.0-only`) are filled.
DENIED_SAYS: dict[str, str] = {
    # no lockfile: the version is missing from the packument; only npm reads
    # `policyRestrictions` (its message under "Could not download ... due to policy
    # violations:", each line after `npm error`), the others only see that no version matches
    "npm": "- {version} ({rule}): ",
    "pnpm": "No matching version found for {package}@{version}",
    "yarn1": "Couldn't find any versions for \"{package}\" that matches \"{version}\"",
    "yarn4": "{package}@npm:{version}: No candidates found",
    "bun": "No version matching \"{version}\" found for specifier \"{package}\" "
           "(but package exists)",
}
DENIED_WAY_OUT_SAYS: dict[str, tuple[str, ...]] = {
    # the way through, where the client prints it: npm alone reads the packument's message
    "npm": ("newest admitted: {admitted}",
            "for an exception ask {contact}: mirrorgate allow {package}@VERSION --why ... "
            "--until DATE admits it until that date"),
}
LOCKED_DENIED_SAYS: dict[str, str] = {
    # a lockfile names the version: the tarball answers 403; npm prints the body's `error`,
    # pnpm and yarn 4 the status line's text, yarn 1 and bun only the status code
    "npm": "GET {url} - mirrorgate denied {package}@{version} by its {rule} rule",
    "pnpm": "GET {url}: Forbidden: mirrorgate denied {package}@{version} ({named}); "
            "nearest admitted {admitted}; for an exception ask {contact} - 403",
    "yarn1": "{url}: Request failed \"403 Forbidden\"",
    "yarn4": "Response Code: 403 (Forbidden: mirrorgate denied {package}@{version} ({named}); "
             "nearest admitted {admitted}; for an exception ask {contact})",
    "bun": "GET {url} - 403",
}
LOCKED_WAY_OUT_SAYS: dict[str, tuple[str, ...]] = {
    "npm": ("nearest admitted: {admitted}; for an exception ask {contact}: mirrorgate allow "
            "{package}@{version} --why ... --until DATE admits it until that date",),
}
CONTACT = "npm-admins@example.com"
"""The MIRRORGATE_OPERATOR_CONTACT the matrix and the docs' examples run with."""


def says(template: str, registry: str, package: str, version: str, rule: str,
         admitted: str = "1.2.0", contact: str = CONTACT, detail: str | None = None) -> str:
    """A `*_SAYS` line for an unscoped `package`@`version`; `detail`, what the status line
    says beside the rule (the license a license rule refused)."""
    url = f"{registry}{package}/-/{package}-{version}.tgz"
    named = f"{rule} rule: {detail}" if detail else f"{rule} rule"
    return template.format(package=package, version=version, rule=rule, url=url,
                           admitted=admitted, contact=contact, named=named)
