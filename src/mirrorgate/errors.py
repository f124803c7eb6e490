"""The root of mirrorgate's own exceptions, so a caller can catch "ours" in one clause.

Every error mirrorgate raises on purpose derives from `MirrorgateError`: a refused request, an
upstream that failed, a rules file that cannot be honoured, a job that cannot be decoded. An
exception that is not one of these is a bug, and is logged as one.
"""

from __future__ import annotations

__all__ = ["MirrorgateError"]


class MirrorgateError(Exception):
    """Something mirrorgate decided or detected; the text says what and what to do."""
