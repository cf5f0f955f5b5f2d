"""Kubernetes ``resource.Quantity``: exact values, upstream parsing and canonical printing.

Capacities, counters and capacity requests are quantities, and results echo them back as
strings (``consumedCapacity``). To agree with the API server and the upstream allocator
byte for byte this module re-states apimachinery's ``resource.Quantity``:

* the same grammar and error texts as ``ParseQuantity``;
* the same two internal forms: a small fixed-point form (an int64 mantissa and a base-10
  scale, upstream's ``int64Amount``) and an arbitrary-precision decimal (upstream's
  ``inf.Dec``). The form is observable: ``AsInt64`` (CEL ``isInteger``/``asInteger``) only
  succeeds for the fixed-point form, so ``1000m`` is not an integer while ``1k`` is;
* parsing rounds values finer than 1n up (away from zero), binary values are capped at
  2^63-1, and a canonical input string is remembered and printed back as given;
* ``String()``'s canonical form: the largest suffix that loses no precision, BinarySI kept
  binary only when exact, DecimalSI and DecimalExponent in steps of 10^3.

Values are kept as ``mantissa * 10**exponent`` and never expanded into huge integers, so
inputs like ``1e2147483647`` (legal upstream) cannot exhaust memory. Equality, ordering and
hashing are by value and consistent with ``int`` and ``Fraction`` (``1Gi == 1073741824``).
"""

from __future__ import annotations

import enum
from fractions import Fraction
from typing import Final

__all__ = [
    "ERR_FORMAT_WRONG",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "Format",
    "Quantity",
    "QuantityError",
    "parse_quantity",
    "parse_quantity_field",
    "trim_quantity_field",
]

_SPLIT_RE_STRING: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG: Final = f"quantities must match the regular expression '{_SPLIT_RE_STRING}'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"

_MOST_POSITIVE: Final = (1 << 63) - 1
_MOST_NEGATIVE: Final = -(1 << 63)
_MAX_INT64_FACTORS: Final = 18  # decimal digits that always fit an int64
_LOG10_MAX_INT64: Final = 19
_NANO: Final = -9
_MAX_INT32: Final = (1 << 31) - 1
# Aligning two exponents materialises 10**delta; upstream would try just as hard, but a
# selector must not be able to stall the process, so arithmetic refuses absurd spans.
_MAX_ALIGN: Final = 100_000
_HASH_MODULUS: Final = (1 << 61) - 1  # CPython's numeric hash modulus (sys.hash_info.modulus)

_DIGITS: Final = frozenset("0123456789")
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")


class QuantityError(ValueError):
    """A string that is not a quantity, with upstream's message as ``str(err)``."""


class Format(enum.StrEnum):
    """How a quantity prefers to be printed (upstream ``resource.Format``)."""

    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6
    BINARY_SI = "BinarySI"  # 12Mi
    DECIMAL_SI = "DecimalSI"  # 12M


_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60,
}
_DECIMAL_BY_EXPONENT: Final = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT: Final = {e: s for s, e in _BINARY_SUFFIXES.items()}


def _go_rem(a: int, b: int) -> int:
    """Go's ``%``: the remainder takes the sign of the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _fits_int64(value: int) -> bool:
    return _MOST_NEGATIVE <= value <= _MOST_POSITIVE


def _div_away_from_zero(value: int, divisor: int) -> int:
    """``value / divisor`` rounded away from zero (``divisor`` > 0)."""
    q, r = divmod(abs(value), divisor)
    if r:
        q += 1
    return -q if value < 0 else q


def _strip_factor(value: int, base: int) -> tuple[int, int]:
    """``value = rest * base**times`` with ``rest`` not divisible by ``base`` (0 stays 0)."""
    times = 0
    if value == 0:
        return 0, 0
    while value % base == 0:
        value //= base
        times += 1
    return value, times


def _digit_count(value: int) -> int:
    return len(str(abs(value))) if value else 0


class Quantity:
    """An immutable Kubernetes quantity.

    Internally ``mantissa * 10**exponent`` in one of upstream's two forms: ``fixed`` (the
    int64 fast form; the mantissa fits an int64) or decimal (``inf.Dec``). Build one with
    :func:`parse_quantity` or the ``from_*`` constructors.
    """

    __slots__ = ("_exponent", "_fixed", "_format", "_mantissa", "_text")

    _mantissa: int
    _exponent: int
    _fixed: bool
    _format: Format
    _text: str

    def __init__(
        self,
        mantissa: int,
        exponent: int = 0,
        *,
        fmt: Format = Format.DECIMAL_SI,
        fixed: bool | None = None,
        text: str = "",
    ) -> None:
        if fixed is None:
            fixed = _fits_int64(mantissa)
        if fixed and not _fits_int64(mantissa):
            raise ValueError("fixed-point quantity mantissa must fit an int64")
        object.__setattr__(self, "_mantissa", mantissa)
        object.__setattr__(self, "_exponent", exponent)
        object.__setattr__(self, "_fixed", fixed)
        object.__setattr__(self, "_format", Format(fmt))
        object.__setattr__(self, "_text", text)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    # --- constructors ---------------------------------------------------------------------

    @classmethod
    def from_int(cls, value: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """Upstream ``NewQuantity(value, format)``: an integer in the fixed-point form."""
        if not _fits_int64(value):
            return cls(value, 0, fmt=fmt, fixed=False)
        return cls(value, 0, fmt=fmt, fixed=True)

    @classmethod
    def from_milli(cls, value: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """Upstream ``NewMilliQuantity``: ``value / 1000``."""
        return cls(value, -3, fmt=fmt)

    @classmethod
    def from_scaled(cls, value: int, scale: int) -> Quantity:
        """Upstream ``NewScaledQuantity``: ``value * 10**scale`` in DecimalSI."""
        return cls(value, scale, fmt=Format.DECIMAL_SI)

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return parse_quantity(text)

    # --- introspection --------------------------------------------------------------------

    @property
    def format(self) -> Format:
        return self._format

    @property
    def is_fixed_point(self) -> bool:
        """True for upstream's int64 form, which is what makes :meth:`as_int64` succeed."""
        return self._fixed

    def identity(self) -> tuple[int, int, bool]:
        """Value *and* internal form: equal only for quantities that behave identically in
        every upstream operation (``1`` and ``1000m`` are equal but not identical)."""
        return (self._mantissa, self._exponent, self._fixed)

    def sign(self) -> int:
        return (self._mantissa > 0) - (self._mantissa < 0)

    def is_zero(self) -> bool:
        return self._mantissa == 0

    def to_fraction(self) -> Fraction:
        """The exact value. Refuses exponents so large the value cannot be materialised."""
        self._check_materialisable()
        if self._exponent >= 0:
            return Fraction(self._mantissa * 10**self._exponent)
        return Fraction(self._mantissa, 10**-self._exponent)

    def _check_materialisable(self) -> None:
        if self._mantissa and abs(self._exponent) > _MAX_ALIGN:
            raise QuantityError(f"quantity {self} is out of the supported range")

    # --- upstream accessors ---------------------------------------------------------------

    def as_int64(self) -> int | None:
        """Upstream ``AsInt64``: the value when the fixed-point form holds an integer that
        fits an int64, else None (always None for the decimal form, as upstream)."""
        if not self._fixed:
            return None
        if self._exponent == 0:
            return self._mantissa
        if self._exponent < 0:
            return None
        if self._mantissa == 0:
            return 0
        if self._exponent >= _LOG10_MAX_INT64:
            return None
        result = self._mantissa * 10**self._exponent
        return result if _fits_int64(result) else None

    def as_integer(self) -> int | None:
        """Alias of :meth:`as_int64` (the CEL ``asInteger`` semantics, None for an error)."""
        return self.as_int64()

    def is_integer(self) -> bool:
        """CEL ``isInteger``: whether :meth:`as_int64` succeeds."""
        return self.as_int64() is not None

    def as_approximate_float(self) -> float:
        """Upstream ``AsApproximateFloat64``: mantissa times a power of ten in float64."""
        if self._mantissa == 0:
            return 0.0
        try:
            base = float(self._mantissa)
        except OverflowError:
            return float("inf") if self._mantissa > 0 else float("-inf")
        if self._exponent == 0:
            return base
        return base * _go_pow10(self._exponent)

    def scaled_value(self, scale: int) -> int:
        """Upstream ``ScaledValue``: ``value / 10**scale`` rounded away from zero. Exact
        (upstream wraps around beyond int64; here the true integer is returned)."""
        if self._mantissa == 0:
            return 0
        delta = self._exponent - scale
        if delta >= 0:
            if delta > _MAX_ALIGN:
                raise QuantityError(f"quantity {self} is out of the supported range")
            return int(self._mantissa * 10**delta)
        down = -delta
        if down > _digit_count(self._mantissa) + 1:
            return 1 if self._mantissa > 0 else -1
        return _div_away_from_zero(self._mantissa, 10**down)

    def value(self) -> int:
        """Upstream ``Value``: the value rounded up (away from zero) to an integer."""
        return self.scaled_value(0)

    def milli_value(self) -> int:
        """Upstream ``MilliValue``: ``ceil(value * 1000)`` away from zero."""
        return self.scaled_value(-3)

    # --- arithmetic -----------------------------------------------------------------------

    def add(self, other: Quantity) -> Quantity:
        """Upstream ``q.Add(y)`` on a copy: the sum; a zero receiver takes ``y``'s format."""
        fmt = other._format if self._mantissa == 0 else self._format
        if self._fixed and other._fixed:
            fixed = _fixed_add(self._mantissa, self._exponent, other._mantissa, other._exponent)
            if fixed is not None:
                return Quantity(fixed[0], fixed[1], fmt=fmt, fixed=True)
        return _decimal_add(self, other, fmt=fmt, negate_other=False)

    def sub(self, other: Quantity) -> Quantity:
        """Upstream ``q.Sub(y)`` on a copy."""
        fmt = other._format if self._mantissa == 0 else self._format
        if self._fixed and other._fixed and other._mantissa != _MOST_NEGATIVE:
            fixed = _fixed_add(self._mantissa, self._exponent, -other._mantissa, other._exponent)
            if fixed is not None:
                return Quantity(fixed[0], fixed[1], fmt=fmt, fixed=True)
        return _decimal_add(self, other, fmt=fmt, negate_other=True)

    def neg(self) -> Quantity:
        """Upstream ``Neg`` on a copy."""
        if self._fixed and self._mantissa != _MOST_NEGATIVE:
            return Quantity(-self._mantissa, self._exponent, fmt=self._format, fixed=True)
        return Quantity(-self._mantissa, self._exponent, fmt=self._format, fixed=False)

    def cmp(self, other: Quantity) -> int:
        """-1, 0 or 1 as upstream ``Cmp``."""
        return _compare(self._mantissa, self._exponent, other._mantissa, other._exponent)

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.add(other)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.sub(other)

    def __neg__(self) -> Quantity:
        return self.neg()

    # --- comparison and hashing by value --------------------------------------------------

    def _cmp_any(self, other: object) -> int | None:
        if isinstance(other, Quantity):
            return self.cmp(other)
        if isinstance(other, bool):
            return None
        if isinstance(other, int):
            return _compare(self._mantissa, self._exponent, other, 0)
        if isinstance(other, Fraction):
            if other.denominator == 1:
                return _compare(self._mantissa, self._exponent, other.numerator, 0)
            mine = self.to_fraction()
            return (mine > other) - (mine < other)
        return None

    def __eq__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c == 0

    def __ne__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c != 0

    def __lt__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c < 0

    def __le__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c <= 0

    def __gt__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c > 0

    def __ge__(self, other: object) -> bool:
        c = self._cmp_any(other)
        return NotImplemented if c is None else c >= 0

    def __hash__(self) -> int:
        # CPython hashes a rational n/d as n * d^-1 modulo 2^61-1; computing that directly
        # keeps hash(Quantity) == hash(int) == hash(Fraction) without expanding 10**exponent.
        if self._mantissa == 0:
            return 0
        power = pow(10, self._exponent, _HASH_MODULUS)
        h = (abs(self._mantissa) % _HASH_MODULUS) * power % _HASH_MODULUS
        if self._mantissa < 0:
            h = -h
        return -2 if h == -1 else h

    # --- printing -------------------------------------------------------------------------

    def __str__(self) -> str:
        if self._text:
            return self._text
        return _canonical(self)

    def canonical(self) -> str:
        """The canonical form, ignoring a remembered input string."""
        return _canonical(self)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self._mantissa, self._exponent, self._format.value, self._fixed, self._text))


def _rebuild(mantissa: int, exponent: int, fmt: str, fixed: bool, text: str) -> Quantity:
    return Quantity(mantissa, exponent, fmt=Format(fmt), fixed=fixed, text=text)


# --- value helpers -------------------------------------------------------------------------


def _magnitude_bounds(mantissa: int, exponent: int) -> tuple[int, int]:
    """(lo, hi) with 10**(lo-1) <= |value| < 10**hi, from the digit count."""
    digits = _digit_count(mantissa)
    return digits - 1 + exponent, digits + exponent


def _compare(m1: int, e1: int, m2: int, e2: int) -> int:
    s1 = (m1 > 0) - (m1 < 0)
    s2 = (m2 > 0) - (m2 < 0)
    if s1 != s2:
        return 1 if s1 > s2 else -1
    if s1 == 0:
        return 0
    lo1, hi1 = _magnitude_bounds(m1, e1)
    lo2, hi2 = _magnitude_bounds(m2, e2)
    if lo1 >= hi2:
        return s1
    if lo2 >= hi1:
        return -s1
    # Magnitudes overlap, so the exponents differ by at most the digit counts: align.
    if e1 > e2:
        m1 *= 10 ** (e1 - e2)
    elif e2 > e1:
        m2 *= 10 ** (e2 - e1)
    return (m1 > m2) - (m1 < m2)


def _fixed_add(m1: int, e1: int, m2: int, e2: int) -> tuple[int, int] | None:
    """Upstream ``int64Amount.Add``: None when an int64 would overflow."""
    if m2 == 0:
        return m1, e1
    if m1 == 0:
        return m2, e2
    if e1 == e2:
        total = m1 + m2
        return (total, e1) if _fits_int64(total) else None
    if e1 > e2:
        if e1 - e2 >= _LOG10_MAX_INT64:
            return None
        scaled = m1 * 10 ** (e1 - e2)
        if not _fits_int64(scaled):
            return None
        total = scaled + m2
        return (total, e2) if _fits_int64(total) else None
    if e2 - e1 >= _LOG10_MAX_INT64:
        return None
    scaled = m2 * 10 ** (e2 - e1)
    if not _fits_int64(scaled):
        return None
    total = m1 + scaled
    return (total, e1) if _fits_int64(total) else None


def _decimal_add(a: Quantity, b: Quantity, *, fmt: Format, negate_other: bool) -> Quantity:
    """``inf.Dec`` addition: exact, aligned to the finer of the two exponents."""
    m1, e1 = a._mantissa, a._exponent
    m2, e2 = (-b._mantissa if negate_other else b._mantissa), b._exponent
    if abs(e1 - e2) > _MAX_ALIGN:
        # Adding a zero needs no alignment; anything else this far apart is refused.
        if m2 == 0:
            return Quantity(m1, e1, fmt=fmt, fixed=False)
        if m1 == 0:
            return Quantity(m2, e2, fmt=fmt, fixed=False)
        raise QuantityError(f"quantity arithmetic out of range: {a} and {b}")
    e = min(e1, e2)
    total = m1 * 10 ** (e1 - e) + m2 * 10 ** (e2 - e)
    return Quantity(total, e, fmt=fmt, fixed=False)


# --- parsing -------------------------------------------------------------------------------


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """Upstream ``parseQuantityString``: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while True:  # leading zeros
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    if pos >= end:
        return positive, text, num or "0", "", ""
    if not num:
        num = "0"
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(ERR_FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, Format] | None:
    """Upstream suffixer ``interpret``: (base, exponent, format)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if not body or not all(c in _DIGITS for c in body):
            return None
        exponent = int(digits)
        # The exponent becomes an int32 scale that is later negated: reject what does not
        # survive that instead of wrapping to an unrelated value.
        if not -_MAX_INT32 <= exponent <= _MAX_INT32:
            return None
        return 10, exponent, Format.DECIMAL_EXPONENT
    return None


def _decimal_digits(value: str) -> tuple[int, int]:
    """The signed numeric text as (unscaled, fraction digits), like ``inf.Dec.SetString``."""
    sign = -1 if value.startswith("-") else 1
    body = value.lstrip("+-")
    whole, _, frac = body.partition(".")
    digits = (whole + frac) or ""
    if not digits:
        raise QuantityError(ERR_NUMERIC)
    return sign * int(digits), len(frac)


def parse_quantity(text: str) -> Quantity:
    """Upstream ``resource.ParseQuantity``; raises :class:`QuantityError` with its message."""
    if not isinstance(text, str):
        raise QuantityError(ERR_FORMAT_WRONG)
    if not text:
        raise QuantityError(ERR_FORMAT_WRONG)
    if text == "0":
        return Quantity(0, 0, fmt=Format.DECIMAL_SI, fixed=True, text="0")

    positive, value, num, denom, suffix = _scan(text)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError(ERR_SUFFIX)
    base, exponent, fmt = interpreted

    # The fixed-point fast path: few enough digits that the scaled mantissa fits an int64.
    precision = 0
    scale = 0
    multiplier = 1
    if fmt is Format.BINARY_SI:
        if exponent >= 0 and not denom:
            multiplier = 1 << exponent
            # upstream estimates the decimal digits of 2**exponent with float32 arithmetic
            precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        else:
            precision = -1
    else:
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))

    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            parsed = int(shifted)
            result = parsed * multiplier
            if _fits_int64(result):
                if not positive:
                    result = -result
                keep = False
                if fmt is Format.BINARY_SI:
                    keep = exponent % 10 == 0 and parsed & 0x07 != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(result, scale, fmt=fmt, fixed=True, text=text if keep else "")

    unscaled, frac_digits = _decimal_digits(value)
    exp10 = -frac_digits
    if base == 10:
        exp10 += exponent
    else:
        unscaled <<= exponent
    negative = unscaled < 0
    unscaled = abs(unscaled)

    # Anything finer than 1n rounds up (away from zero) to the next nano: asking for a tiny
    # bit of a resource must not turn into asking for none. Like inf.Dec.Round, the result
    # is held at exactly nine fractional digits (that only shows in as_approximate_float).
    if unscaled != 0:
        if exp10 < _NANO:
            down = _NANO - exp10
            unscaled = 1 if down > _digit_count(unscaled) + 1 else _div_away_from_zero(unscaled, 10**down)
            exp10 = _NANO
        elif exp10 - _NANO <= _MAX_ALIGN:
            unscaled *= 10 ** (exp10 - _NANO)
            exp10 = _NANO
    if fmt is Format.BINARY_SI and _compare(unscaled, exp10, _MOST_POSITIVE, 0) > 0:
        unscaled, exp10 = _MOST_POSITIVE, 0
    if fmt is Format.BINARY_SI and unscaled != 0 and _compare(unscaled, exp10, 1, 0) < 0:
        fmt = Format.DECIMAL_SI
    if negative:
        unscaled = -unscaled
    return Quantity(unscaled, exp10, fmt=fmt, fixed=False)


# Go's strings.TrimSpace removes Unicode white space around a quantity field, but it sees the
# field's raw JSON text: white space that a JSON encoder escapes (tab, newline and the other
# control characters, U+2028, U+2029) arrives as an escape sequence and is not trimmed. So a
# value "7 " reads as 7 while "7\n" is rejected, whether the object came as YAML or JSON.
_FIELD_BLANKS: Final = (
    " \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u202f\u205f\u3000"
)


def trim_quantity_field(text: str) -> str:
    """A quantity field's text as the API server's decoder parses it (see ``_FIELD_BLANKS``)."""
    return text.strip(_FIELD_BLANKS)


def parse_quantity_field(text: str) -> Quantity:
    """A quantity field of an API object (``Quantity.UnmarshalJSON``): blanks around the value
    trimmed as the API server trims them, then :func:`parse_quantity`. The one parser for
    quantities read from objects and files; CEL's ``quantity()`` uses :func:`parse_quantity`
    directly, as upstream does."""
    if not isinstance(text, str):
        raise QuantityError(ERR_FORMAT_WRONG)
    return parse_quantity(trim_quantity_field(text))


# --- printing ------------------------------------------------------------------------------


def _canonical_decimal(mantissa: int, exponent: int) -> tuple[int, int]:
    """Mantissa and an exponent that is a multiple of 3, with no factor of 10 left beyond
    what that requires (upstream ``AsCanonicalBytes``)."""
    mantissa, times = _strip_factor(mantissa, 10)
    exponent += times
    while _go_rem(exponent, 3) != 0:
        mantissa *= 10
        exponent -= 1
    return mantissa, exponent


def _decimal_text(mantissa: int, exponent: int, fmt: Format) -> str:
    number, exp = _canonical_decimal(mantissa, exponent)
    if fmt is Format.DECIMAL_SI and exp in _DECIMAL_BY_EXPONENT:
        return f"{number}{_DECIMAL_BY_EXPONENT[exp]}"
    # DecimalExponent, and DecimalSI beyond E or below n: exponent notation keeps the value.
    return f"{number}e{exp}" if exp else str(number)


def _canonical(q: Quantity) -> str:
    mantissa, exponent = q._mantissa, q._exponent
    if mantissa == 0:
        return "0"
    fmt = q._format
    if fmt is Format.BINARY_SI:
        if _compare(mantissa, exponent, -1024, 0) > 0 and _compare(mantissa, exponent, 1024, 0) < 0:
            fmt = Format.DECIMAL_SI
        elif exponent < 0:
            stripped, times = _strip_factor(mantissa, 10)
            if exponent + times < 0:  # not an integer: do not lose precision
                fmt = Format.DECIMAL_SI
            else:
                mantissa, exponent = stripped * 10 ** (exponent + times), 0
    if fmt is not Format.BINARY_SI:
        return _decimal_text(mantissa, exponent, fmt)
    if exponent > _MAX_ALIGN:
        return _decimal_text(mantissa, exponent, Format.DECIMAL_EXPONENT)
    whole = mantissa * 10**exponent
    amount, times = _strip_factor(whole, 1024)
    if times * 10 in _BINARY_BY_EXPONENT:
        return f"{amount}{_BINARY_BY_EXPONENT[times * 10]}"
    if times == 0:
        return str(amount)
    # Past Ei there is no binary suffix: fall back to an exact decimal form.
    return _decimal_text(whole, 0, Format.DECIMAL_EXPONENT)


_FLOAT_POW10: Final = tuple(float(f"1e{k}") for k in range(32))
_FLOAT_POW10_POS32: Final = tuple(float(f"1e{32 * k}") for k in range(10))
_FLOAT_POW10_NEG32: Final = tuple(float(f"1e-{32 * k}") for k in range(11))


def _go_pow10(n: int) -> float:
    """Go's ``math.Pow10`` (same table products, so the same rounding)."""
    if 0 <= n <= 308:
        return _FLOAT_POW10_POS32[n // 32] * _FLOAT_POW10[n % 32]
    if -323 <= n < 0:
        m = -n
        return _FLOAT_POW10_NEG32[m // 32] / _FLOAT_POW10[m % 32]
    return float("inf") if n > 0 else 0.0
