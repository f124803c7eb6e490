"""Kubernetes resource quantities ("768Mi", "250m", "1") as numbers the checks can compare.

Only the forms a person writes in requests and limits are accepted: a decimal number with an
optional binary (Ki..Ti) or decimal (k, M, G, T, and m for milli) suffix. Anything else is a
`ValueError`, which the resource check reports rather than guess at.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["cpu_millis", "memory_bytes"]

_FACTORS: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|m|k|M|G|T)?$")


def _quantity(text: object) -> Fraction:
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as 768Mi or 250m")
    return Fraction(match.group(1)) * _FACTORS[match.group(2) or ""]


def memory_bytes(text: object) -> int:
    return int(_quantity(text))


def cpu_millis(text: object) -> int:
    return int(_quantity(text) * 1000)
