"""Special functions (torch.special's, most otherwise falling back to the CPU or reaching the backend
only as a chain of small decomposed ops): erfc/erfcx, lgamma, digamma, polygamma, zeta,
igamma/igammac, i0 (i0e, i1, i1e), Bessel/Airy functions, orthogonal polynomials, ndtri/log_ndtr,
xlogy/xlog1py Scalar overloads.

PyTorch CPU semantics:
- float16/bfloat16 compute in float32 and round once; integer inputs of float ops give the default dtype.
- `erfcx` of float32 is computed in float64 (exp(x^2) * erfc(x) loses ~x^2 ulps in float32), with the
  asymptotic series past x = 25.
- `polygamma` is ATen's: n = 0 its digamma (reflection through pi / tan(pi frac(x)) in float64, NaN at
  negative integers, -+inf at +-0), n = 1 its trigamma (reflection through sin(pi x), so negative
  integers give huge finite values, as on the CPU), n >= 2 (-1)^(n+1) exp(lgamma(n+1)) zeta(n+1, x)
  with ATen's Cephes Hurwitz zeta accumulated in float64 (jax's zeta is wrong for negative q).
- The Bessel/Airy functions and the orthogonal polynomials (special_bessel_j0 ...,
  special_chebyshev_polynomial_t ...) are ATen's Cephes approximations and recurrences, operation for
  operation in the input dtype (float32/float64 only: their CPU kernels raise for float16/bfloat16).
  The polynomials' n is truncated to int64 like ATen's static_cast (NaN/inf: negative, so 0) and the
  recurrences run n steps per element (`lax.while_loop` until no element is left), stopping at NaN.
  Divisions by a scalar go through `_div`: XLA would multiply by a rounded reciprocal.
- `i0` is the Cephes Chebyshev expansion ATen uses (same coefficients), `digamma(±0)` is ∓inf as
  ATen's, not jax's NaN.
- `igamma`/`igammac`: ATen's boundary values, XLA's algorithm in float64, rounded once.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .cephes import (AIRY_AI_AD, AIRY_AI_AFD, AIRY_AI_AFN, AIRY_AI_AGD, AIRY_AI_AGN, AIRY_AI_AN, BESSEL_J0_PP,
                     BESSEL_J0_PQ, BESSEL_J0_QP, BESSEL_J0_QQ, BESSEL_J0_RP, BESSEL_J0_RQ, BESSEL_J1_PP, BESSEL_J1_PQ,
                     BESSEL_J1_QP, BESSEL_J1_QQ, BESSEL_J1_RP, BESSEL_J1_RQ, BESSEL_Y0_YP, BESSEL_Y0_YQ, BESSEL_Y1_YP,
                     BESSEL_Y1_YQ, DIGAMMA_A, I0_A, I0_B, I1_A, I1_B, K0_A, K0_B, K1_A, K1_B, ZETA_A, chbevl, polevl)
from .dtypes import cast, is_low_precision
from ._registry import aten, lower
from .elementwise import binary_float, float_pow, unary_float
from .promotion import compute_dtype, float_dtype, is_float, result_dtype

_F64 = np.dtype(np.float64)


# ---------------------------------------------------------------------------------------------
# helpers


def _i0(x):
    a = jnp.abs(x)
    small = a <= 8
    ys = a / 2 - 2
    yb = 32 / jnp.where(small, jnp.ones((), a.dtype), a) - 2
    vs = jnp.exp(a) * chbevl(ys, I0_A)
    vb = jnp.exp(a) * chbevl(yb, I0_B) / jnp.sqrt(a)
    return jnp.where(small, vs, vb)


def _digamma(x):
    y = lax.digamma(x)
    inf = jnp.full((), np.inf, x.dtype)
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), inf, -inf), y)


def _erfcx(x):
    """exp(x^2) * erfc(x), in float64 (float32 inputs widened), asymptotic for large x; for x < 0
    2 exp(x^2) - erfcx(-x) with x^2 rounded in the input dtype, as ATen's kernel computes it."""
    dt = x.dtype
    wide = _F64 if np.dtype(dt).itemsize <= 4 else dt
    z = cast(jnp.abs(x), wide)
    big = z > 25.0
    zs = jnp.where(big, 1.0, z)
    direct = jnp.exp(zs * zs) * lax.erfc(zs)
    zb = jnp.where(big, z, 26.0)
    t = 1.0 / (2.0 * zb * zb)
    series = (1.0 - t * (1.0 - 3.0 * t * (1.0 - 5.0 * t * (1.0 - 7.0 * t)))) / (zb * math.sqrt(math.pi))
    pos = jnp.where(big, series, direct)
    pos = jnp.where(z == jnp.inf, 0.0, pos)
    neg = 2 * jnp.exp(cast(x * x, wide)) - pos
    r = jnp.where(x < 0, neg, pos)
    return cast(jnp.where(jnp.isnan(x), jnp.nan, r), dt)


def _trigamma(x):
    # ATen's calc_trigamma, in the compute dtype.
    pi = np.asarray(math.pi, x.dtype)
    neg = x < 0.5
    s = jnp.sin(pi * x)
    result = jnp.where(neg, -(pi * pi) / (s * s), jnp.zeros_like(x))
    x = jnp.where(neg, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x
    return jnp.where(neg, -result, result)


def _xlog1py(x, y):
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log1p(y))
    return jnp.where(jnp.isnan(y), jnp.nan, r)


def _xlogy(x, y):
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(y))
    return jnp.where(jnp.isnan(y), jnp.nan, r)


def _no_low_precision(name, fn):
    """ATen's CPU kernel has no float16/bfloat16 version: raise as it does."""

    def lowering(self):
        if np.dtype(self.dtype) != compute_dtype(self.dtype):
            names = {np.dtype(jnp.bfloat16): "BFloat16", np.dtype(np.float16): "Half"}
            raise NotImplementedError(f'"{name}" not implemented for \'{names.get(np.dtype(self.dtype), self.dtype)}\'')
        return fn(self)

    return lowering


# ---------------------------------------------------------------------------------------------
# ATen's Cephes-derived special functions (aten/src/ATen/native/Math.h), operation for operation in
# the dtype ATen computes them in, so that float32 results round like the CPU's. Branches are all
# evaluated and selected with `where`; ATen's data-dependent loops are `lax.while_loop`s over the
# elements still iterating (the others frozen), so every element takes as many steps as on the CPU.
# The series evaluators and coefficient tables are cephes.py's.

_PIO4 = 0.785398163397448309615660845819875721
_3PIO4 = 2.356194490192344928846982537459627163
_SQ2OPI = 0.797884560802865355879892119868763737
_TWOOPI = 0.636619772367581343075535053490057448


def _div(a, d):
    """a / d like ATen's division: XLA rewrites a division by a broadcast scalar (a constant or not)
    into a multiplication by its reciprocal, which rounds differently, unless the divisor is hidden
    behind a barrier as a full array."""
    a = jnp.asarray(a)
    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(d))
    return a / lax.optimization_barrier(jnp.broadcast_to(jnp.asarray(d, a.dtype), shape))


def _bessel_j0(x):
    x = jnp.abs(x)
    xx = x * x
    small = (xx - 5.78318596294678452118e+00) * (xx - 3.04712623436620863991e+01) * polevl(xx, BESSEL_J0_RP)
    small = jnp.where(x < 0.00001, 1.0 - xx / 4.0, small / polevl(xx, BESSEL_J0_RQ))
    w = 25.0 / xx
    big = (polevl(w, BESSEL_J0_PP) / polevl(w, BESSEL_J0_PQ) * jnp.cos(x - _PIO4)
           - 5.0 / x * (polevl(w, BESSEL_J0_QP) / polevl(w, BESSEL_J0_QQ)) * jnp.sin(x - _PIO4))
    return jnp.where(x <= 5.0, small, big * _SQ2OPI / jnp.sqrt(x))


def _bessel_j1(x):
    ax = jnp.abs(x)
    xx = ax * ax
    small = (polevl(xx, BESSEL_J1_RP) / polevl(xx, BESSEL_J1_RQ) * ax
             * (xx - 1.46819706421238932572e+01) * (xx - 4.92184563216946036703e+01))
    w = 5.0 / ax * (5.0 / ax)
    big = (polevl(w, BESSEL_J1_PP) / polevl(w, BESSEL_J1_PQ) * jnp.cos(ax - _3PIO4)
           - 5.0 / ax * (polevl(w, BESSEL_J1_QP) / polevl(w, BESSEL_J1_QQ)) * jnp.sin(ax - _3PIO4))
    r = jnp.where(ax <= 5.0, small, big * _SQ2OPI / jnp.sqrt(ax))
    return jnp.where(x < 0, -r, r)


def _bessel_y0(x):
    xx = x * x
    small = polevl(xx, BESSEL_Y0_YP) / polevl(xx, BESSEL_Y0_YQ) + _TWOOPI * jnp.log(x) * _bessel_j0(x)
    small = jnp.where(x == 0, -jnp.inf, jnp.where(x < 0, jnp.nan, small))
    w = 25.0 / xx
    big = (polevl(w, BESSEL_J0_PP) / polevl(w, BESSEL_J0_PQ) * jnp.sin(x - _PIO4)
           + 5.0 / x * (polevl(w, BESSEL_J0_QP) / polevl(w, BESSEL_J0_QQ)) * jnp.cos(x - _PIO4))
    return jnp.where(x <= 5.0, small, big * _SQ2OPI / jnp.sqrt(x))


def _bessel_y1(x):
    xx = x * x
    small = (x * (polevl(xx, BESSEL_Y1_YP) / polevl(xx, BESSEL_Y1_YQ))
             + _TWOOPI * (_bessel_j1(x) * jnp.log(x) - 1.0 / x))
    small = jnp.where(x == 0, -jnp.inf, jnp.where(x < 0, jnp.nan, small))
    w = 5.0 / x * (5.0 / x)
    big = (polevl(w, BESSEL_J1_PP) / polevl(w, BESSEL_J1_PQ) * jnp.sin(x - _3PIO4)
           + 5.0 / x * (polevl(w, BESSEL_J1_QP) / polevl(w, BESSEL_J1_QQ)) * jnp.cos(x - _3PIO4))
    return jnp.where(x <= 5.0, small, big * _SQ2OPI / jnp.sqrt(x))


def _modified_bessel_i0(x):
    ax = jnp.abs(x)
    a = chbevl(ax / 2.0 - 2.0, I0_A)
    b = chbevl(32.0 / ax - 2.0, I0_B)
    e = jnp.exp(ax)
    return jnp.where(ax <= 8.0, e * a, e * b / jnp.sqrt(ax))


def _modified_bessel_i1(x):
    ax = jnp.abs(x)
    a = chbevl(ax / 2.0 - 2.0, I1_A)
    b = chbevl(32.0 / ax - 2.0, I1_B)
    e = jnp.exp(ax)
    r = jnp.where(ax <= 8.0, a * ax * e, e * b / jnp.sqrt(ax))
    return jnp.where(x < 0, -r, r)


def _modified_bessel_k(x, order, scaled):
    """K0/K1 (scaled: times exp(x)) for x > 0; inf at 0, NaN below."""
    if order == 0:
        A, B = K0_A, K0_B
    else:
        A, B = K1_A, K1_B
    a = chbevl(x * x - 2.0, A)
    b = chbevl(8.0 / x - 2.0, B)
    if order == 0 and not scaled:
        # ATen writes `std::log(0.5 * x)`: a double, so this line runs in float64
        wide = np.dtype(np.float64)
        small = cast(a, wide) - jnp.log(0.5 * cast(x, wide)) * cast(_modified_bessel_i0(x), wide)
        small = cast(small, x.dtype)
    elif order == 0:
        small = (a - jnp.log(0.5 * x) * _modified_bessel_i0(x)) * jnp.exp(x)
    else:
        small = jnp.log(0.5 * x) * _modified_bessel_i1(x) + a / x
        if scaled:
            small = small * jnp.exp(x)
    big = b / jnp.sqrt(x) if scaled else jnp.exp(-x) * b / jnp.sqrt(x)
    r = jnp.where(x <= 2.0, small, big)
    return jnp.where(x == 0, jnp.inf, jnp.where(x < 0, jnp.nan, r))


def _airy_ai(x):
    dt = x.dtype
    # x < -2.09: the asymptotic expansion
    sx = jnp.sqrt(-x)
    z = 1.0 / _div(-2.0 * x * sx, 3.0)
    zz = z * z
    t = _div(-2.0 * x * sx, 3.0) + np.asarray(0.25, dt) * np.asarray(math.pi, dt)
    neg = (np.asarray(5.64189583547756286948e-01, dt) / jnp.sqrt(sx)
           * (jnp.sin(t) * (1.0 + zz * polevl(zz, AIRY_AI_AFN) / polevl(zz, AIRY_AI_AFD))
              - jnp.cos(t) * (z * polevl(zz, AIRY_AI_AGN) / polevl(zz, AIRY_AI_AGD))))
    # x >= 2.09: exponentially small
    zeta = _div(2.0 * x * jnp.sqrt(x), 3.0)
    iz = 1.0 / zeta
    pos = (np.asarray(5.64189583547756286948e-01, dt) * (polevl(iz, AIRY_AI_AN) / polevl(iz, AIRY_AI_AD))
           / (2.0 * jnp.sqrt(jnp.sqrt(x)) * jnp.exp(zeta)))
    # in between: the Maclaurin series, until a term is below epsilon relative to the sum
    series = (x >= -2.09) & (x < 2.09)
    xs = jnp.where(series, x, jnp.zeros_like(x))
    z3 = xs * xs * xs
    eps = np.finfo(dt).eps
    one = jnp.ones_like(xs)

    def cond(s):
        return jnp.any(s[-1])

    def body(s):
        k, m, n, f, g, act = s
        m2 = m * z3
        k = k + 1.0
        m2 = _div(m2, k)
        n2 = n * z3
        k = k + 1.0
        n2 = _div(n2, k)
        m2 = _div(m2, k)
        f2 = f + m2
        k = k + 1.0
        n2 = _div(n2, k)
        g2 = g + n2
        m, n, f, g = (jnp.where(act, new, old) for new, old in ((m2, m), (n2, n), (f2, f), (g2, g)))
        return k, m, n, f, g, act & (jnp.abs(m2 / f2) > eps)

    state = (np.asarray(1.0, dt), one, xs, one, xs, series)
    _, _, _, f, g, _ = lax.while_loop(cond, body, state)
    mid = np.asarray(0.355028053887817239260, dt) * f - np.asarray(0.258819403792806798405, dt) * g
    r = jnp.where(x < -2.09, neg, jnp.where(x >= 2.09, pos, mid))
    r = jnp.where(x > 103.892, jnp.zeros_like(x), r)
    return jnp.where(jnp.isinf(x) | jnp.isnan(x), jnp.nan, r)


def _spherical_bessel_j0(x):
    dt = x.dtype

    def c(num, den):  # ATen's `T(num) / T(den)`, a division in T
        return np.asarray(num, dt) / np.asarray(den, dt)

    xx = x * x
    series = 1.0 + xx * (c(-1.0, 6.0) + xx * (c(1.0, 120.0) + xx * (c(-1.0, 5040.0) + xx * (
        c(1.0, 362880.0) + xx * (c(-1.0, 39916800.0) + xx * c(1.0, 6227020800.0))))))
    r = jnp.where(jnp.abs(x) < 0.5, series, jnp.sin(x) / x)
    return jnp.where(jnp.isinf(x), jnp.zeros_like(x), r)


def _calc_digamma(x):
    """ATen's calc_digamma: -0/+0 -> +-inf, negative integers NaN, negative x by reflection (its
    pi / tan(pi * frac(x)) in float64), recurrence up to x >= 10, then the asymptotic series."""
    dt = x.dtype
    neg = x < 0
    y = jnp.where(neg, 1 - x, x)
    result = jnp.zeros_like(x)
    for _ in range(10):  # x > 0 reaches 10 within 10 steps
        lt = y < 10
        result = jnp.where(lt, result - 1 / y, result)
        y = jnp.where(lt, y + 1, y)
    z = 1 / (y * y)
    tail = jnp.where(y < 1.0e17, z * polevl(z, DIGAMMA_A), jnp.zeros_like(y))
    r = jnp.where(y == 10, result + np.asarray(2.25175258906672110764, dt), result + jnp.log(y) - 0.5 / y - tail)
    wide = cast(x, _F64)
    frac = wide - jnp.trunc(wide)
    r = jnp.where(neg, r - cast(math.pi / jnp.tan(math.pi * frac), dt), r)
    r = jnp.where(neg & (x == jnp.trunc(x)), jnp.nan, r)
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), jnp.inf, -jnp.inf).astype(dt), r)


def _zeta(x, q, acc):
    """ATen's Hurwitz zeta(x, q) (Cephes): the direct sum of (q + k)^-x until k >= 9 and q + k > 9
    (or a term below MACHEP of the sum), then Euler-Maclaurin, all in `acc` (float64 for float32, as
    ATen's acc_type), except the first term, a pow in the input dtype as ATen writes it."""
    x, q = jnp.broadcast_arrays(x, q)
    machep = 1.11022302462515654042e-16
    xa, qa = cast(x, acc), cast(q, acc)
    special = (x == 1) | (x < 1) | ((q <= 0) & ((q == jnp.floor(q)) | (x != jnp.floor(x))))
    s0 = cast(float_pow(q, -x), acc)

    def looping(i, a, done):
        return ~done & ((i < 9) | (a <= 9.0))

    def cond(st):
        i, a, b, s, done = st
        return jnp.any(looping(i, a, done))

    def body(st):
        i, a, b, s, done = st
        act = looping(i, a, done)
        a2 = a + 1.0
        b2 = float_pow(a2, -xa)
        s2 = s + b2
        a, b, s = jnp.where(act, a2, a), jnp.where(act, b2, b), jnp.where(act, s2, s)
        done = done | (act & (-machep * s < b) & (b < machep * s))
        return i + 1, a, b, s, done

    state = (jnp.asarray(0, jnp.int32), qa, jnp.zeros_like(qa), s0, special)
    _, a, b, s, done = lax.while_loop(cond, body, state)
    w = a
    s = jnp.where(done, s, s + b * w / (xa - 1.0) - 0.5 * b)
    a = jnp.ones_like(xa)
    k = 0.0
    for c in ZETA_A:
        a = a * (xa + k)
        b = b / w
        t = _div(a * b, c)
        s = jnp.where(done, s, s + t)
        done = done | (jnp.abs(t / s) < machep)
        k += 1.0
        a = a * (xa + k)
        b = b / w
        k += 1.0
    r = jnp.where(x == 1, jnp.inf, jnp.where(x < 1, jnp.nan, jnp.where((q <= 0) & (q == jnp.floor(q)), jnp.inf,
                                                                          jnp.where(q <= 0, jnp.nan, s))))
    return cast(jnp.where(special, r, s), x.dtype)


def _recurrence(run, count, p, q, step):
    """ATen's `for (j = 1; j <= count && !isnan(q); j++) { r = step(j, p, q); p = q; q = r; }` for
    the elements in `run` (the others keep q); returns q. All elements step together; the loop ends
    when none is left."""

    def active(j, q):
        return run & (j <= count) & ~jnp.isnan(q)

    def cond(st):
        return jnp.any(active(st[0], st[2]))

    def body(st):
        j, p, q = st
        act = active(j, q)
        r = step(j, p, q)
        return j + 1, jnp.where(act, q, p), jnp.where(act, r, q)

    return lax.while_loop(cond, body, (jnp.asarray(1, jnp.int64), p, q))[2]


def _chebyshev(kind, shifted, x, n):
    """ATen's (shifted) Chebyshev polynomials T/U/V/W: x in the compute dtype, n int64."""
    x, n = jnp.broadcast_arrays(x, n)
    dt = x.dtype

    def f(v):  # an int64 expression converted to T, as ATen's mixed arithmetic does
        return v.astype(dt)

    y = x + x - 1.0 if shifted else x
    if shifted:
        at_pos, at_neg = x == 1, x == 0
    else:
        at_pos, at_neg = (jnp.abs(x) == 1) & (x > 0), (jnp.abs(x) == 1) & ~(x > 0)
    even = (n % 2) == 0
    one = jnp.ones_like(x)
    sign = jnp.where(even, one, -one)
    n1, n21 = f(n + 1), f(n + n + 1)
    edge_pos = {"t": one, "u": n1, "v": one, "w": n21}[kind]
    edge_neg = {"t": sign, "u": jnp.where(even, n1, f(-(n + 1))), "v": jnp.where(even, n21, f(-(n + n + 1))),
                "w": sign}[kind]
    threshold = {"t": 6, "u": 6 if shifted else 8, "v": 6 if shifted else 8, "w": 4 if shifted else 8}[kind]
    trig = (n > threshold) & (jnp.abs(y) < 1)
    ac = cast(jnp.arccos(cast(y, _F64)), dt)  # XLA's float32 acos is off by an ulp more often than glibc's
    if kind == "t":
        trig_val = jnp.cos(f(n) * ac)
    elif kind == "u":
        s = jnp.sin(ac)
        trig_val = jnp.where(s != 0, jnp.sin(n1 * ac) / s, n1 * jnp.cos(n1 * ac) / y)
    elif kind == "v":
        trig_val = jnp.where(jnp.sin(ac / 2.0) != 1, jnp.cos((f(n) + 0.5) * ac) / jnp.cos(ac / 2.0),
                             jnp.where(even, n21, f(-(n + n + 1))))
    else:
        other = sign if shifted else jnp.where(x > 0, n21, sign)
        trig_val = jnp.where(jnp.cos(ac / 2.0) != 1, jnp.sin((f(n) + 0.5) * ac) / jnp.sin(ac / 2.0), other)
    first = {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]
    run = ~at_pos & ~at_neg & ~trig & (n >= 2)
    two_y = y + y
    rec = _recurrence(run, n - 1, one, first, lambda j, p, q: two_y * q - p)
    r = jnp.where(n == 1, first, rec)
    r = jnp.where(n == 0, one, r)
    r = jnp.where(trig, trig_val, r)
    r = jnp.where(at_neg, edge_neg, r)
    r = jnp.where(at_pos, edge_pos, r)
    return jnp.where(n < 0, jnp.zeros_like(x), r)


def _hermite(physicists, x, n):
    """ATen's Hermite polynomials H (physicists) / He: NaN past n = 128 (float32) or 512 (float64)."""
    x, n = jnp.broadcast_arrays(x, n)
    dt = x.dtype
    one = jnp.ones_like(x)
    limit = 128 if dt == np.float32 else 512
    if physicists:
        first = x + x
        rec = _recurrence((n >= 2) & (n <= limit), n - 1, one, first,
                          lambda j, p, q: (x + x) * q - (j + j).astype(dt) * p)
    else:
        first = x
        rec = _recurrence((n >= 2) & (n <= limit), n - 1, one, first, lambda j, p, q: x * q - j.astype(dt) * p)
    r = jnp.where(n > limit, jnp.full_like(x, jnp.nan), rec)
    r = jnp.where(n == 1, first, r)
    r = jnp.where(n == 0, one, r)
    return jnp.where(n < 0, jnp.zeros_like(x), r)


def _laguerre(x, n):
    x, n = jnp.broadcast_arrays(x, n)
    dt = x.dtype
    one = jnp.ones_like(x)
    first = 1.0 - x
    rec = _recurrence((n >= 2) & (x != 0), n - 1, one, first,
                      lambda j, p, q: _div(((j + j).astype(dt) + (1.0 - x)) * q - j.astype(dt) * p, j + 1))
    r = jnp.where(n == 1, first, rec)
    r = jnp.where((n == 0) | (x == 0), one, r)
    return jnp.where(n < 0, jnp.zeros_like(x), r)


def _legendre(x, n):
    x, n = jnp.broadcast_arrays(x, n)
    dt = x.dtype
    one = jnp.ones_like(x)
    edge = jnp.abs(x) == 1
    rec = _recurrence((n >= 2) & ~edge, n - 1, one, x,
                      lambda j, p, q: _div((j + j + 1).astype(dt) * x * q - j.astype(dt) * p, j + 1))
    r = jnp.where(n == 1, x, rec)
    r = jnp.where(n == 0, one, r)
    r = jnp.where(edge, jnp.where((x > 0) | ((n % 2) == 0), one, -one), r)
    return jnp.where(n < 0, jnp.zeros_like(x), r)


# PyTorch's names of dtypes in its CPU kernels' dispatch errors, by numpy dtype name
_DTYPE_NAMES = {"bfloat16": "BFloat16", "float16": "Half", "int64": "Long", "int32": "Int", "int16": "Short",
                "int8": "Char", "uint8": "Byte", "bool": "Bool", "complex64": "ComplexFloat",
                "complex128": "ComplexDouble"}


def _float32_64(name, dt):
    """The CPU kernels of the Cephes functions exist for float32/float64 only."""
    if not is_float(dt) or is_low_precision(dt):
        raise _not_implemented(name, dt)


def _not_implemented(name, dt):
    return NotImplementedError(f'"{name}" not implemented for \'{_DTYPE_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)}\'')


def _float_unary(name, fn):
    """A unary op whose CPU kernel exists for float32/float64 only: integers go to the default dtype,
    float16/bfloat16 raise as on the CPU."""

    def lowering(self):
        dt = float_dtype(self.dtype)
        _float32_64(name, dt)
        return fn(cast(self, dt))

    return lowering


def _polynomial(name, fn):
    """A polynomial op (x, n): x and n in their common float dtype (float32/float64 only), n then
    truncated to int64 as ATen's static_cast does (NaN, inf and out of range give INT64_MIN on x86)."""

    def lowering(x, n):
        dt = float_dtype(result_dtype(x, n))
        _float32_64(name, dt)
        return fn(cast(x, dt), cast(cast(n, dt), np.int64))

    return lowering


def _igamma(name, upper):
    """Regularized incomplete gamma P(a, x) (Q for upper) with ATen's boundary values; the series and
    continued fractions are XLA's, in float64 (ATen's float32 kernel is accurate to ~1e-6 absolute,
    XLA's float32 one is not near a ~ x > 50), rounded once."""

    def lowering(self, other):
        dt = result_dtype(self, other)
        if not is_float(dt):  # float16/bfloat16 too: computed in float
            raise _not_implemented(name, dt)
        a, x = jnp.broadcast_arrays(cast(self, _F64), cast(other, _F64))
        lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)  # values at x = 0 and at x = inf
        r = (lax.igammac if upper else lax.igamma)(a, x)
        r = jnp.where(jnp.isinf(x), hi, r)
        r = jnp.where(jnp.isinf(a), jnp.where(jnp.isinf(x), jnp.nan, lo), r)
        r = jnp.where(x == 0, lo, r)
        r = jnp.where(a == 0, jnp.where(x > 0, hi, jnp.nan), r)
        r = jnp.where((x < 0) | (a < 0), jnp.nan, r)
        return cast(r, dt)

    return lowering


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# digamma(Tensor self) -> Tensor
lower(aten.digamma.default)(unary_float(_digamma))


# erfc(Tensor self) -> Tensor
lower(aten.erfc.default)(unary_float(lax.erfc))


# i0(Tensor self) -> Tensor
lower(aten.i0.default)(unary_float(_i0))


# igamma(Tensor self, Tensor other) -> Tensor
lower(aten.igamma.default)(_igamma("igamma_cpu", upper=False))

# igammac(Tensor self, Tensor other) -> Tensor
lower(aten.igammac.default)(_igamma("igammac_cpu", upper=True))


# lgamma(Tensor self) -> Tensor
lower(aten.lgamma.default)(unary_float(lambda x: lax.lgamma(x)))


# polygamma(int n, Tensor self) -> Tensor
@lower(aten.polygamma.default)
def polygamma(n, self):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    dt = float_dtype(self.dtype)
    x = cast(self, compute_dtype(dt))
    if n == 0:
        r = _calc_digamma(x)
    elif n == 1:
        r = _trigamma(x)
    else:
        # ATen's calc_polygamma: ((n % 2) ? 1 : -1) * exp(lgamma(n + 1)) * zeta(n + 1, x), the factor in
        # the compute dtype, zeta accumulating in float64 for float32/float64 (float32 for bf16/f16)
        if x.dtype == np.float32:
            fact = np.exp(np.float32(math.lgamma(n + 1)))
        else:
            fact = math.exp(math.lgamma(n + 1))
        acc = _F64 if dt == x.dtype else x.dtype
        z = _zeta(jnp.full_like(x, n + 1), x, acc)
        r = np.asarray(fact if n % 2 else -fact, x.dtype) * z
    return cast(r, dt)


# special_airy_ai(Tensor x) -> Tensor
lower(aten.special_airy_ai.default)(_float_unary("airy_ai_cpu", _airy_ai))

# special_bessel_j0(Tensor self) -> Tensor
lower(aten.special_bessel_j0.default)(_float_unary("bessel_j0_cpu", _bessel_j0))

# special_bessel_j1(Tensor self) -> Tensor
lower(aten.special_bessel_j1.default)(_float_unary("bessel_j1_cpu", _bessel_j1))

# special_bessel_y0(Tensor self) -> Tensor
lower(aten.special_bessel_y0.default)(_float_unary("bessel_y0_cpu", _bessel_y0))

# special_bessel_y1(Tensor self) -> Tensor
lower(aten.special_bessel_y1.default)(_float_unary("bessel_y1_cpu", _bessel_y1))

# special_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor
# special_chebyshev_polynomial_t.x_scalar(Scalar x, Tensor n) -> Tensor
# special_chebyshev_polynomial_t.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_chebyshev_polynomial_t.default, aten.special_chebyshev_polynomial_t.x_scalar,
      aten.special_chebyshev_polynomial_t.n_scalar)(
    _polynomial("chebyshev_polynomial_t_cpu", lambda x, n: _chebyshev("t", False, x, n))
)

# special_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor
# special_chebyshev_polynomial_u.x_scalar(Scalar x, Tensor n) -> Tensor
# special_chebyshev_polynomial_u.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_chebyshev_polynomial_u.default, aten.special_chebyshev_polynomial_u.x_scalar,
      aten.special_chebyshev_polynomial_u.n_scalar)(
    _polynomial("chebyshev_polynomial_u_cpu", lambda x, n: _chebyshev("u", False, x, n))
)

# special_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor
# special_chebyshev_polynomial_v.x_scalar(Scalar x, Tensor n) -> Tensor
# special_chebyshev_polynomial_v.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_chebyshev_polynomial_v.default, aten.special_chebyshev_polynomial_v.x_scalar,
      aten.special_chebyshev_polynomial_v.n_scalar)(
    _polynomial("chebyshev_polynomial_v_cpu", lambda x, n: _chebyshev("v", False, x, n))
)

# special_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor
# special_chebyshev_polynomial_w.x_scalar(Scalar x, Tensor n) -> Tensor
# special_chebyshev_polynomial_w.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_chebyshev_polynomial_w.default, aten.special_chebyshev_polynomial_w.x_scalar,
      aten.special_chebyshev_polynomial_w.n_scalar)(
    _polynomial("chebyshev_polynomial_w_cpu", lambda x, n: _chebyshev("w", False, x, n))
)


# special_erfcx(Tensor self) -> Tensor
lower(aten.special_erfcx.default)(_no_low_precision("erfcx_cpu", unary_float(_erfcx)))

# special_hermite_polynomial_h(Tensor x, Tensor n) -> Tensor
# special_hermite_polynomial_h.x_scalar(Scalar x, Tensor n) -> Tensor
# special_hermite_polynomial_h.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_hermite_polynomial_h.default, aten.special_hermite_polynomial_h.x_scalar,
      aten.special_hermite_polynomial_h.n_scalar)(
    _polynomial("hermite_polynomial_h_cpu", lambda x, n: _hermite(True, x, n))
)

# special_hermite_polynomial_he(Tensor x, Tensor n) -> Tensor
# special_hermite_polynomial_he.x_scalar(Scalar x, Tensor n) -> Tensor
# special_hermite_polynomial_he.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_hermite_polynomial_he.default, aten.special_hermite_polynomial_he.x_scalar,
      aten.special_hermite_polynomial_he.n_scalar)(
    _polynomial("hermite_polynomial_he_cpu", lambda x, n: _hermite(False, x, n))
)

# special_i0e(Tensor self) -> Tensor
lower(aten.special_i0e.default)(unary_float(lambda x: jax.scipy.special.i0e(x)))

# special_i1(Tensor self) -> Tensor
lower(aten.special_i1.default)(unary_float(lambda x: jax.scipy.special.i1(x)))

# special_i1e(Tensor self) -> Tensor
lower(aten.special_i1e.default)(unary_float(lambda x: jax.scipy.special.i1e(x)))


# special_laguerre_polynomial_l(Tensor x, Tensor n) -> Tensor
# special_laguerre_polynomial_l.x_scalar(Scalar x, Tensor n) -> Tensor
# special_laguerre_polynomial_l.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_laguerre_polynomial_l.default, aten.special_laguerre_polynomial_l.x_scalar,
      aten.special_laguerre_polynomial_l.n_scalar)(
    _polynomial("laguerre_polynomial_l_cpu", _laguerre)
)

# special_legendre_polynomial_p(Tensor x, Tensor n) -> Tensor
# special_legendre_polynomial_p.x_scalar(Scalar x, Tensor n) -> Tensor
# special_legendre_polynomial_p.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_legendre_polynomial_p.default, aten.special_legendre_polynomial_p.x_scalar,
      aten.special_legendre_polynomial_p.n_scalar)(
    _polynomial("legendre_polynomial_p_cpu", _legendre)
)


# special_log_ndtr(Tensor self) -> Tensor
@lower(aten.special_log_ndtr.default)
@lambda fn: _no_low_precision("log_ndtr_cpu", unary_float(fn))
def special_log_ndtr(x):
    t = x * np.asarray(math.sqrt(0.5), x.dtype)
    lo = jnp.log(_erfcx(-t) / 2) - t * t
    hi = jnp.log1p(-lax.erfc(t) / 2)
    return jnp.where(x < -1.0, lo, hi)


# special_modified_bessel_i0(Tensor self) -> Tensor
lower(aten.special_modified_bessel_i0.default)(_float_unary("modified_bessel_i0_cpu", _modified_bessel_i0))

# special_modified_bessel_i1(Tensor self) -> Tensor
lower(aten.special_modified_bessel_i1.default)(_float_unary("modified_bessel_i1_cpu", _modified_bessel_i1))

# special_modified_bessel_k0(Tensor self) -> Tensor
lower(aten.special_modified_bessel_k0.default)(
    _float_unary("modified_bessel_k0_cpu", lambda x: _modified_bessel_k(x, 0, False))
)

# special_modified_bessel_k1(Tensor self) -> Tensor
lower(aten.special_modified_bessel_k1.default)(
    _float_unary("modified_bessel_k1_cpu", lambda x: _modified_bessel_k(x, 1, False))
)

# special_ndtri(Tensor self) -> Tensor
lower(aten.special_ndtri.default)(_no_low_precision("ndtri_cpu", unary_float(lambda x: jax.scipy.special.ndtri(x))))


# special_scaled_modified_bessel_k0(Tensor x) -> Tensor
lower(aten.special_scaled_modified_bessel_k0.default)(
    _float_unary("scaled_modified_bessel_k0_cpu", lambda x: _modified_bessel_k(x, 0, True))
)

# special_scaled_modified_bessel_k1(Tensor x) -> Tensor
lower(aten.special_scaled_modified_bessel_k1.default)(
    _float_unary("scaled_modified_bessel_k1_cpu", lambda x: _modified_bessel_k(x, 1, True))
)

# special_shifted_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_t.x_scalar(Scalar x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_t.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_shifted_chebyshev_polynomial_t.default, aten.special_shifted_chebyshev_polynomial_t.x_scalar,
      aten.special_shifted_chebyshev_polynomial_t.n_scalar)(
    _polynomial("shifted_chebyshev_polynomial_t_cpu", lambda x, n: _chebyshev("t", True, x, n))
)

# special_shifted_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_u.x_scalar(Scalar x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_u.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_shifted_chebyshev_polynomial_u.default, aten.special_shifted_chebyshev_polynomial_u.x_scalar,
      aten.special_shifted_chebyshev_polynomial_u.n_scalar)(
    _polynomial("shifted_chebyshev_polynomial_u_cpu", lambda x, n: _chebyshev("u", True, x, n))
)

# special_shifted_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_v.x_scalar(Scalar x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_v.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_shifted_chebyshev_polynomial_v.default, aten.special_shifted_chebyshev_polynomial_v.x_scalar,
      aten.special_shifted_chebyshev_polynomial_v.n_scalar)(
    _polynomial("shifted_chebyshev_polynomial_v_cpu", lambda x, n: _chebyshev("v", True, x, n))
)

# special_shifted_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_w.x_scalar(Scalar x, Tensor n) -> Tensor
# special_shifted_chebyshev_polynomial_w.n_scalar(Tensor x, Scalar n) -> Tensor
lower(aten.special_shifted_chebyshev_polynomial_w.default, aten.special_shifted_chebyshev_polynomial_w.x_scalar,
      aten.special_shifted_chebyshev_polynomial_w.n_scalar)(
    _polynomial("shifted_chebyshev_polynomial_w_cpu", lambda x, n: _chebyshev("w", True, x, n))
)

# special_spherical_bessel_j0(Tensor x) -> Tensor
lower(aten.special_spherical_bessel_j0.default)(_float_unary("spherical_bessel_j0_cpu", _spherical_bessel_j0))

# special_xlog1py(Tensor self, Tensor other) -> Tensor
# special_xlog1py.other_scalar(Tensor self, Scalar other) -> Tensor
# special_xlog1py.self_scalar(Scalar self, Tensor other) -> Tensor
lower(aten.special_xlog1py.default, aten.special_xlog1py.other_scalar, aten.special_xlog1py.self_scalar)(
    # (16-bit: PyTorch's CPU kernel rounds the Scalar and the log to the dtype before multiplying; this
    # rounds once, within an ulp of it)
    binary_float(_xlog1py, rounded=False)
)

# special_zeta(Tensor self, Tensor other) -> Tensor
# special_zeta.other_scalar(Tensor self, Scalar other) -> Tensor
# special_zeta.self_scalar(Scalar self, Tensor other) -> Tensor
@lower(aten.special_zeta.default, aten.special_zeta.other_scalar, aten.special_zeta.self_scalar)
def special_zeta(self, other):
    dt = float_dtype(result_dtype(self, other))
    _float32_64("zeta_cpu", dt)
    return _zeta(cast(self, dt), cast(other, dt), _F64)


# xlogy.Scalar_Other(Tensor self, Scalar other) -> Tensor
# xlogy.Scalar_Self(Scalar self, Tensor other) -> Tensor
# (16-bit: as xlog1py, the CPU rounds the Scalar and the log; this rounds once, within an ulp)
lower(aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self)(binary_float(_xlogy, rounded=False))
