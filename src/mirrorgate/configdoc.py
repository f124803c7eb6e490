"""docs/configuration.md, rendered from `config.VARIABLES`.

The reference a person reads is generated from the table the code reads, so the two cannot
drift; a test fails when the committed file is stale. Regenerate it with
`python -m mirrorgate.configdoc > docs/configuration.md`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from mirrorgate.config import COMMANDS, PROXY, VARIABLES, WORKER, Var

# the one statement of the default policy, made from the rules that apply it (a renderer of
# docs may read the layer above the settings it documents; config.py itself may not)
from mirrorgate.rules.inforce import DEFAULT_POLICY

__all__ = ["REGENERATE", "render"]

REGENERATE = "python -m mirrorgate.configdoc > docs/configuration.md"

_HEAD = f"""\
# Configuration reference

<!-- Generated from `mirrorgate.config.VARIABLES` by `{REGENERATE}`.
     Edit the variables there, not this file: tests/test_docs.py fails when it is stale. -->

Every setting is an environment variable, read once at start-up; a value that cannot be honoured
stops the process with a message naming the variable and an example of a good value, and
`mirrorgate check-config` prints a summary of the settings and the rules in force, problems
first (`--json`: every resolved setting, secrets redacted), or every error (exit status 2). A
`MIRRORGATE_*` or `MIRROR_*` variable that mirrorgate does not read (a typo such as
`MIRRORGATE_RULE_FILE`) is named in a warning by `check-config` (first, or on stderr with
`--json`; exit status still 0) and by `serve` and `worker` at start-up
(`config_variable_unknown`), with the closest known name.
`mirrorgate --help` prints the same list.

*Read by*: `{PROXY}` is `mirrorgate serve` answering clients; `{WORKER}` is the mirror worker,
alone in `mirrorgate worker` or inside `mirrorgate serve`; `{COMMANDS}` are the operator commands
(`mirrorgate check`...). Give a variable read by both the proxy and the worker the same value on
both processes of a sidecar pod.
"""

_TAIL = f"""
## The default policy

{DEFAULT_POLICY}
The rules file's tables add the others ([admission rules](serving.md#admission-rules));
`mirrorgate check-config` prints the rules in force, one line each.

## Policy sets

One proxy serves teams whose risk is not the same: the payments team that ships to production
wants a week's cooldown and no install scripts; a prototype's CI can trial a new rule in report
mode. A **policy set** is a `[policy.NAME]` table of the rules file whose own tables lay over the
default rules, key by key: what a `[policy.NAME.TABLE]` writes wins, what it does not is
inherited (`[policy.payments.age] minimum = "7d"` keeps the default `[age]`'s `exempt` list;
a `packages` list replaces the default's). A line of the client tokens file (a static client or
a CI issuer line) names the set its clients are judged by with a last column `policy:NAME`;
every client without one gets the default rules.

```toml
# MIRRORGATE_RULES_FILE: the default rules, for every client without a policy set
[age]
minimum = "1d"
exempt = ["@acme/*"]

[release]                       # the release signals: one set for everyone (below)

# the payments team: a week's cooldown, no install scripts, one more package kept out
[policy.payments.age]
minimum = "7d"                  # `exempt` is inherited from [age]

[policy.payments.install_scripts]
block = true
allow = ["esbuild"]

[policy.payments.deny]
packages = ["request", "left-pad"]

# a prototype's CI trials the deny list in report mode before the default adopts it
[policy.prototype.deny]
mode = "report"
packages = ["moment@<2.29.4"]
```

```text
# MIRRORGATE_CLIENT_TOKENS_FILE
dashboard     sha256:9e02d4c1...   # no policy: the default rules
payments-ci   https://token.actions.githubusercontent.com repository=acme/payments-* policy:payments
payments-bot  sha256:5f1c0b7a... publish:@acme-payments/* policy:payments
proto-ci      https://token.actions.githubusercontent.com repository=acme/proto-* policy:prototype
```

- **What a set may override**: `[integrity]`, `[age]`, `[deny]`, `[allow]`,
  `[install_scripts]`, `[advisories]` (severity, malware, ignore, unavailable, max_age,
  fast_lane, mode; the source and refresh are the default's, so one feed serves every set),
  `[signatures]`, `[provenance]`, `[publisher]`, `[license]` (each team its own license
  policy: [licenses.md](licenses.md#per-team-policy-sets)), and `mode` (`[policy.NAME] mode =
  "report"`: every table of the set without a mode of its own). Not `[release]` (a release signal's
  verdict is a record of a version's bytes, one per version, kept in the state store for every
  client), `[private]` (first-party names are a fact about a name), `[publish]` (the tokens
  file's `publish:` grant is per client) or `[[exception]]` (the file's exceptions and the
  waivers of `mirrorgate allow` apply to every set). Each is refused naming its key.
- **Names**: 1 to 40 lowercase letters, digits, `-` and `_`; `default` is the name of the rules
  without a set (in `check-config` and the status page).
- **What a client gets**: its packuments, version documents, dist-tags, search results and
  tarballs are gated by its set's rules: a version its set refuses leaves its packument for
  npm's `policyRestrictions` and its tarball answers 403, as for the default rules. Each set's
  packuments are cached under keys of their own, the warm path's included: one set's
  packument (or its `ETag`) is never another's. A cold name costs one fill per set asked for
  it.
- **Both files checked against each other**: a tokens-file line naming a set the rules file
  does not define stops start-up, and `check-config` exits 2, naming both files and the line;
  at a reload, a rewrite of either that would leave a line naming an undefined set is refused
  (`rules_reload_failed` or `client_tokens_reload_failed`, the last good file stays in force).
  A change to a set is in force within two seconds of the rules file's change, a change of a
  line's `policy:` within ten of the tokens file's, as any other change of them.
- **Seen**: `mirrorgate check-config` prints each set, the lines that name it and its rules
  where they differ from the default's (`--json`: `policies`, each set whole); the status page
  lists the sets, who they apply to and their rules; `mirrorgate check --policy NAME
  LOCKFILE` answers as the proxy answers a client of that set.
- **What stays one for everyone**: the release signals' verdicts and first-party names (above);
  the mirror, whose worker re-gates a job with the default rules: a version only a laxer set
  admits is served to its clients from public, and no job is sent for it (a `job_not_enqueued`
  line) until a pull after the default rules admit it;
  `/npm/-/npm/v1/security/*` (npm audit, answered from the advisory index by the default
  rules); the status page's package view (the default rules); the exposure warnings (a
  version turned bad by the default rules' word); and `mirrorgate_rule_denials_total`, counted
  per fill under whichever set it ran.

## The cloud SDKs' variables

The cloud SDKs read their own variables as well: `AWS_REGION`, `AWS_ENDPOINT_URL_SQS` and the
default AWS credential chain for `sqs` ([queues](queues.md#amazon-sqs)); `PUBSUB_EMULATOR_HOST`
and Application Default Credentials for `pubsub` ([queues](queues.md#google-pubsub)).
"""


def _cell(text: str) -> str:
    # A table cell ends at a pipe or a line break; neither may cut a help text short.
    return text.replace("|", "\\|").replace("\n", " ")


def _row(var: Var) -> str:
    default = f"`{var.default}`" if var.default is not None else "unset"
    meaning = var.help + ("; a secret: never logged, shown as `**redacted**` by check-config"
                          if var.secret else "")
    if var.see is not None:
        meaning += f" ([more]({var.see}))"
    return (f"| `{var.name}` | {default} | {', '.join(var.read_by)} | {_cell(meaning)} |")


def render(variables: Iterable[Var] = VARIABLES) -> str:
    """The whole of docs/configuration.md, in `VARIABLES` order (the order `--help` uses)."""
    rows = "\n".join(_row(var) for var in variables)
    return (f"{_HEAD}\n| variable | default | read by | meaning |\n| --- | --- | --- | --- |\n"
            f"{rows}\n{_TAIL}")


if __name__ == "__main__":
    sys.stdout.write(render())
