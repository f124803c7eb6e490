"""The release verdicts: what a version's bytes show against the release before it.
`judge` (each version's verdict, kept, and the I/O it needs), `reading` (one version's first
read, riding on its relay), `capabilities` (the capability signals' decision), `findings` (what
a verdict is made from, shared by the judge and the reading), `baseline` (which release a
version is compared with). They read the packuments (`gate.packuments`) and what is kept;
`reading` asks the judge through the `Judging` protocol it declares, never by import.
docs/verdicts.md.
"""
