"""Numbers written for people: plain decimals, never scientific notation.

A figure a user must read ("+1.4e-06 bits per byte") is written ``+0.0000014``: the digits that
matter, with the zeros that say how small it is. Values under :data:`TINY` are written as a bound.
"""

from __future__ import annotations

from decimal import Decimal

#: below this the decimals would run past a dozen places: written ``< 0.000000001`` instead
TINY = 1e-9


def plain(v: float, digits: int = 2, *, sign: bool = False) -> str:
    """``v`` with ``digits`` significant digits as a plain decimal; thousands separators from 1,000
    up; ``sign`` puts a ``+`` before positive values.

    >>> plain(1.4e-06), plain(0.28), plain(-3.3e-5), plain(12345.678), plain(0), plain(1.0)
    ('0.0000014', '0.28', '-0.000033', '12,346', '0', '1')
    >>> plain(1.4e-06, sign=True), plain(3e-12), plain(float("nan"))
    ('+0.0000014', '< 0.000000001', 'nan')
    """
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    a = abs(v)
    if a == 0:
        return "0"
    if a < TINY:
        return ("-" if v < 0 else "") + "< " + format(Decimal(str(TINY)), "f")
    if a >= 1000:
        text = f"{v:,.0f}"
    else:
        text = format(Decimal(f"{v:.{digits}g}"), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return ("+" if sign and v > 0 else "") + text
