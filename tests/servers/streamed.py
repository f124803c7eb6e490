"""A rules file under which a first pull streams as it arrives: every release signal off.

The default's capability signals read every first pull, and a tarball of at most 16 MiB they
read is withheld until their verdict (docs/serving.md#a-refusal-from-the-bytes): nothing would
stream to hang up on, to cut mid-body or to drain. Tests of the stream itself run under these.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.rules.releasetable import RELEASE_SIGNALS

__all__ = ["STREAMED", "streamed_rules"]

STREAMED = "[release]\n" + "".join(f'{signal.replace("-", "_")} = "off"\n'
                                   for signal in RELEASE_SIGNALS)


def streamed_rules(folder: Path, extra: str = "") -> str:
    """The path of a rules file holding `extra` and every release signal off, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "streamed.toml"
    path.write_text(extra + STREAMED, encoding="utf-8")
    return str(path)
