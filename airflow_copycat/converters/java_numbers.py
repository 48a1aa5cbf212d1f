"""Java's float and double text, as Kafka's JsonConverter writes and reads float32 and float64.

Contract: ``_java_double_json(x)`` / ``_java_float_json(x)`` return the JSON text Jackson writes
for a Java ``double`` / ``float`` (``x`` already holding a float32 value): ``Double.toString`` /
``Float.toString`` as specified since JDK 19 (the shortest decimal that rounds back, plain for
1e-3 <= |x| < 1e7, else ``d.dddE±n``: ``1.0``, ``1.0E10``, ``4.9E-324``), and NaN and the
infinities as the quoted strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``. ``_as_float32(x,
path)`` rounds a float to float32 (``DataException`` naming ``path`` when out of range);
``_to_f32(node)`` reads a JSON number as ``Float.parseFloat`` does (the nearest float32 to its
exact value).
"""

from __future__ import annotations

import decimal as _decimal
import struct as _struct
from fractions import Fraction

from ..connect.errors import DataException


def _f32_bits(x: float) -> int:
    return _struct.unpack("<I", _struct.pack("<f", x))[0]


def _f32(bits: int) -> float:
    return _struct.unpack("<f", _struct.pack("<I", bits))[0]


_F32_MAX_BITS = 0x7F7FFFFF


def _as_float32(x: float, path: str) -> float:
    try:
        return _struct.unpack("<f", _struct.pack("<f", x))[0]
    except OverflowError:
        raise DataException(f"{path}: {x} is out of range for float32") from None


def _to_f32(node: int | _decimal.Decimal) -> float:
    """``Float.parseFloat`` of the JSON number ``node``: the float32 nearest to its exact value.

    Fast path: the nearest float64, then the nearest float32 to that. Rounding twice gives the
    float32 nearest to the exact value unless the float64 lies exactly halfway between two
    float32s (every such midpoint is a float64, and rounding to the nearest float64 cannot cross
    one): that case, and values beyond float32's range, take the exact path (:func:`_round_f32`)."""
    try:
        f64 = float(node)
        f32 = _f32(_f32_bits(f64))
    except OverflowError:
        return _round_f32(Fraction(node))
    if f32 == f64 or f64 != f64:
        return f32
    bits = _f32_bits(abs(f32))
    other = _f32(bits + 1 if abs(f64) > abs(f32) else bits - 1)  # the float32 on f64's other side
    if abs(f64) == (abs(f32) + other) / 2:
        return _round_f32(Fraction(node))
    return f32


def _round_f32(q: Fraction) -> float:
    """The float32 nearest to the exact number ``q`` (ties to even), as a Python float."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    try:
        guess = _f32_bits(float(q))
    except OverflowError:
        guess = _F32_MAX_BITS
    cands = [b for b in (guess - 1, guess, guess + 1) if 0 <= b <= _F32_MAX_BITS]
    best = min(cands, key=lambda b: (abs(Fraction(_f32(b)) - q), b & 1))
    if best == _F32_MAX_BITS and q >= Fraction(_f32(best)) + (Fraction(_f32(best)) - Fraction(_f32(best - 1))) / 2:
        return sign * float("inf")
    return sign * _f32(best)


def _digits(m: int, k: int) -> tuple[int, int]:
    while m and m % 10 == 0:
        m //= 10
        k += 1
    return m, k


def _closest(x: float, p: int, in_range) -> tuple[int, int] | None:
    """Among the p-digit decimals next to ``x``, the one nearest ``x`` that rounds back to it
    (ties: even last digit), as (m, k) meaning m * 10**k; None when none rounds back."""
    mant, exp = f"{x:.{p - 1}e}".split("e")
    n, k = int(mant.replace(".", "")), int(exp) - p + 1
    exact = Fraction(x)
    scale = Fraction(10) ** k
    best = None
    for m in (n - 1, n, n + 1):
        q = m * scale
        if q > 0 and in_range(q):
            key = (abs(q - exact), m & 1)
            if best is None or key < best[0]:
                best = (key, m)
    return None if best is None else _digits(best[1], k)


def _java_format(negative: bool, m: int, k: int) -> str:
    """m * 10**k in Java's Double.toString layout: plain for 1e-3 <= |x| < 1e7, else d.dddE±n."""
    digits = str(m)
    e = len(digits) - 1 + k
    if -3 <= e < 7:
        if e >= 0:
            text = digits[: e + 1].ljust(e + 1, "0") + "." + (digits[e + 1:] or "0")
        else:
            text = "0." + "0" * (-e - 1) + digits
    else:
        text = digits[0] + "." + (digits[1:] or "0") + "E" + str(e)
    return "-" + text if negative else text


def _non_finite_json(x: float) -> str | None:
    if x != x:
        return '"NaN"'
    if x in (float("inf"), float("-inf")):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return None


def _java_double_json(x: float) -> str:
    special = _non_finite_json(x)
    if special is not None:
        return special
    if x == 0:
        return "-0.0" if str(x)[0] == "-" else "0.0"
    ax = abs(x)
    sign, digits, exp = _decimal.Decimal(repr(ax)).as_tuple()  # repr: shortest, nearest
    m, k = _digits(int("".join(map(str, digits))), exp)
    if m < 10 and Fraction(m) * Fraction(10) ** k != Fraction(ax):
        # one digit: Java picks the closest of the 1- and 2-digit decimals (4.9E-324, not 5e-324)
        m, k = _closest(ax, 2, lambda q: float(q) == ax) or (m, k)
    return _java_format(x < 0, m, k)


def _java_float_json(x: float) -> str:
    """``x`` already holds a float32 value."""
    special = _non_finite_json(x)
    if special is not None:
        return special
    if x == 0:
        return "-0.0" if str(x)[0] == "-" else "0.0"
    ax = abs(x)
    bits = _f32_bits(ax)
    if 1e-3 <= ax < 1e7 and bits & 0x7FFFFF:
        # Fast path. Not a power of two, so the values that round back to ``ax`` lie symmetrically
        # around it: the nearest p-digit decimal (what correctly rounded "%.*e" gives) rounds back
        # whenever any p-digit decimal does, and float32 rounding (ties to even) decides the edges
        # as Java does. In this range Java writes plain digits, where one digit is as short as two.
        # If p digits round back, p + 1 do (the p-digit decimal is one of them): binary search.
        lo, hi = 1, 9  # 9 digits always round back
        while lo < hi:
            mid = (lo + hi) // 2
            if _f32_bits(float("%.*e" % (mid - 1, ax))) == bits:
                hi = mid
            else:
                lo = mid + 1
        mant, exp = ("%.*e" % (lo - 1, ax)).split("e")
        return _java_format(x < 0, *_digits(int(mant.replace(".", "")), int(exp) - lo + 1))
    here = Fraction(ax)
    below = Fraction(_f32(bits - 1)) if bits > 0 else Fraction(0)
    above = Fraction(_f32(bits + 1)) if bits < _F32_MAX_BITS else 2 * here - below
    lo, hi, inclusive = (below + here) / 2, (here + above) / 2, bits % 2 == 0

    def rounds_back(q: Fraction) -> bool:
        return lo < q < hi or (inclusive and (q == lo or q == hi))

    for p in range(1, 10):
        found = _closest(ax, p, rounds_back)
        if found is not None:
            if p == 1:
                found = _closest(ax, 2, rounds_back) or found
            return _java_format(x < 0, *found)
    raise AssertionError(f"no decimal rounds back to float32 {x!r}")  # 9 digits always do
