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
