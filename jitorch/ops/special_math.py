"""Special functions NumPy lacks, vectorised in float64: log-gamma, digamma, trigamma, the Hurwitz zeta
function, polygamma, the modified Bessel functions I0 and I1 (and their exponentially scaled forms) and the
inverse error function.

Each takes a float64 array and returns a float64 array; callers compute the half types and float32 in float64
too and round once, so their results are at least as accurate as torch's (which computes float32 in float32).

The algorithms and coefficients are those of the Cephes Math Library (Stephen L. Moshier; 3-clause BSD
licence, as PyTorch's ATen/native/Math.h reproduces it), which torch's own kernels port: ``lgam``,
``psi``, ``zeta``, ``chbevl`` with the I0/I1 Chebyshev tables. The inverse error function is Cephes ndtri's
rational approximations, of arguments that stay exact up to ``|y| = 1``.

Loops that shift arguments (recurrences) run only over the elements that still need a step.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import special_cephes
from .cephes_tables import NDTRI_P0, NDTRI_P1, NDTRI_P2, NDTRI_Q0, NDTRI_Q1, NDTRI_Q2

_LOG_SQRT_2PI = 0.91893853320467274178
_LOG_PI = 1.14472988584940017414

# Cephes lgam: Stirling's series (A), and log gamma on [2, 3] as x B(x) / C(x), C monic
_LGAM_A = (8.11614167470508450300E-4, -5.95061904284301438324E-4, 7.93650340457716943945E-4,
           -2.77777777730099687205E-3, 8.33333333333331927722E-2)
_LGAM_B = (-1.37825152569120859100E3, -3.88016315134637840924E4, -3.31612992738871184744E5,
           -1.16237097492762307383E6, -1.72173700820839662146E6, -8.53555664245765465627E5)
_LGAM_C = (1.0, -3.51815701436523470549E2, -1.70642106651881159223E4, -2.20528590553854454839E5,
           -1.13933444367982507207E6, -2.53252307177582951285E6, -2.01889141433532773231E6)
_LGAM_HUGE = 2.556348e305  # lgamma overflows beyond
_EULER = 0.57721566490153286061


def polevl(x, coefficients):
    """The polynomial with ``coefficients`` (highest degree first) at ``x``, by Horner's rule."""
    result = np.zeros_like(x)
    for c in coefficients:
        result = result * x + c
    return result


def _steps(x, condition, step):
    """Apply ``step(values, indices)`` to the elements of ``x`` where ``condition(values)`` holds, until it
    holds nowhere: a recurrence run only where it is still needed."""
    idx = np.flatnonzero(condition(x))
    while idx.size:
        step(x[idx], idx)
        idx = idx[condition(x[idx])]


def _lgamma_small(x):
    """lgamma for finite ``x`` in (-34, 13) that is not a pole: shift into [2, 3) by the recurrence
    ``Gamma(u + 1) = u Gamma(u)``, then the rational approximation. The last step up from [1, 2) is
    taken as ``-log1p(u - 1)`` (exact ``u - 1``), which keeps the zero at 1 accurate relative to the result."""
    u = x.copy()
    z = np.ones_like(x)

    def down(v, i):
        u[i] = v - 1
        z[i] *= u[i]

    def up(v, i):
        z[i] /= v
        u[i] = v + 1

    _steps(u, lambda v: v >= 3, down)
    _steps(u, lambda v: v < 1, up)
    low = u < 2
    w = np.where(low, u - 1, u - 2)
    tail = w * polevl(w, _LGAM_B) / polevl(w, _LGAM_C)
    result = np.log(np.abs(z)) - np.where(low, np.log1p(u - 1), 0.0) + tail
    # 1/x overflows for the tiniest x: there lgamma(x) = -log|x| - gamma x to O(x^2)
    tiny = np.abs(x) < 1e-8
    return np.where(tiny, -np.log(np.abs(np.where(tiny, x, 1.0))) - _EULER * x, result)


def _lgamma_large(x):
    """Stirling's series for ``x >= 13``."""
    q = (x - 0.5) * np.log(x) - x + _LOG_SQRT_2PI
    p = 1 / (x * x)
    series = np.where(x >= 1000, ((7.9365079365079365079365e-4 * p - 2.7777777777777777777778e-3) * p
                                  + 0.0833333333333333333333), polevl(p, _LGAM_A))
    return np.where(x > 1e8, q, q + series / x)


_NEAR_ROOT = 0.2
_ROOT_TERMS = 24


def _lgamma_near_root(e, root):
    """lgamma(root + e) for root 1 or 2 and |e| < 0.2 from its Taylor series, exact relative to the result
    however small (the rational approximation is exact only relative to 1 there): ``-gamma e + sum((-e)^k
    zeta(k) / k)`` at 1, ``(1 - gamma) e + sum((-e)^k (zeta(k) - 1) / k)`` at 2 (``zeta(k) - 1`` is the
    Hurwitz ``zeta(k, 2)``). 24 terms: 0.2^24 / 24 is far below an ulp of the first."""
    acc = np.zeros_like(e)
    series = _root_series(root)
    for k in range(_ROOT_TERMS + 1, 1, -1):
        acc = acc * e + (-1) ** k * series[k - 2] / k
    return (root - 1 - _EULER + acc * e) * e + 0.0  # (+ 0.0: lgamma(1) is +0.0, as C's; the product is -0.0)


def lgamma(x):
    """``log |Gamma(x)|``: +inf at the poles (0 and the negative integers) and at +-inf, NaN for NaN."""
    x = np.asarray(x, np.float64)
    out = np.full(x.shape, np.inf)
    out[np.isnan(x)] = np.nan
    finite = np.isfinite(x) & ~((x <= 0) & (x == np.floor(x)))
    small = finite & (x > -34) & (x < 13)
    large = finite & (x >= 13) & (x <= _LGAM_HUGE)
    reflected = finite & (x <= -34)
    out[small] = _lgamma_small(x[small])
    out[large] = _lgamma_large(x[large])
    for root in (1, 2):
        near = np.abs(x - root) < _NEAR_ROOT
        out[near] = _lgamma_near_root(x[near] - root, root)
    if reflected.any():
        # Gamma(x) Gamma(1 - x) = pi / sin(pi x), with the sine's argument reduced to [0, 1/2]
        q = -x[reflected]
        p = np.floor(q)
        f = q - p
        f = np.where(f > 0.5, p + 1 - q, f)
        out[reflected] = _LOG_PI - np.log(q * np.sin(np.pi * f)) - _lgamma_large(q)
    return out


_PSI_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
          -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
          8.33333333333333333333E-2)
_PSI_10 = 2.25175258906672110764


def _upward(x, bound, term):
    """``(x shifted up to >= bound, the sum of term(x) over the steps)``: ``f(x) = f(x + 1) + term(x)``
    recurrences (digamma's ``-1/x``, trigamma's ``1/x^2``)."""
    x = x.copy()
    total = np.zeros_like(x)

    def step(v, i):
        total[i] += term(v)
        x[i] = v + 1

    _steps(x, lambda v: v < bound, step)
    return x, total


def _c_library(fn, x, dtype):
    """``fn`` (a NumPy ufunc) of ``x`` as the C library's long double function, rounded once to ``dtype``:
    the correctly rounded value, nearly always, that torch's calls of C's ``log``, ``tan``, ``sinf``... give.
    NumPy's own float64 loops are its version's (NumPy 1.26 on AVX-512 runs SVML's, within 4 ulps: 22% of
    float64 logs and 40% of tangents a bit off 2.4's), and digamma's reflection and trigamma's poles scale
    that last bit up a thousandfold. About 170 ns an element."""
    return fn(np.asarray(x, np.longdouble)).astype(dtype)


def _pi_over_tan_pi(x):
    """``pi / tan(pi x)`` from the fractional part of ``x`` (exact), so that large ``|x|`` lose nothing."""
    return np.pi / _c_library(np.tan, np.pi * np.fmod(x, 1.0), np.float64)


def digamma(x, dtype=np.float64):
    """The logarithmic derivative of Gamma: +-inf at +-0 (the opposite sign), NaN at the negative integers
    and -inf, inf at inf. Computed in ``dtype`` (np.float32 or np.float64) step by step as torch computes it
    in its operand's (the reflection's ``pi / tan(pi r)`` in float64, rounded): near a pole float32's
    rounding of ``1 - x`` and of the steps up shows (fuzz seed 7100390: ``digamma_`` thrice, 1e-3 apart)."""
    f = np.dtype(dtype).type
    x = np.asarray(x, f)
    out = np.copysign(np.inf, -x)
    negative_integer = (x < 0) & (x == np.floor(x))
    out[negative_integer | np.isnan(x)] = np.nan
    ok = (x != 0) & ~negative_integer & ~np.isnan(x)
    v = x[ok]
    reflected = v < 0
    shift = np.where(reflected, _pi_over_tan_pi(np.where(reflected, v, 0.5).astype(np.float64)), 0.0).astype(f)
    v = np.where(reflected, f(1) - v, v)
    v, total = _upward(v, 10, lambda u: f(-1) / u)
    z = f(1) / (v * v)
    series = np.where(v < f(1e17), z * polevl(z, [f(c) for c in _PSI_A]), f(0))
    with np.errstate(invalid="ignore"):  # inf - inf at x = inf, replaced below
        log = _c_library(np.log, v, f)
        result = np.where(v == 10, total + f(_PSI_10), total + log - f(0.5) / v - series)
    out[ok] = np.where(np.isposinf(v), f(np.inf), result) - shift
    return out


def trigamma(x, dtype=np.float64):
    """The derivative of digamma (torch's algorithm: reflection below 1/2, six steps up, the asymptotic
    series), computed in ``dtype`` (np.float32 or np.float64) as torch computes it in its operand's: its
    float32 values at the poles below 0 are large and finite (the float32 sine of pi times a negative integer
    is not 0), float64's far larger."""
    f = np.dtype(dtype).type
    x = np.asarray(x, f)
    reflected = x < f(0.5)
    sign = np.where(reflected, f(-1), f(1))
    pi = f(np.pi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = _c_library(np.sin, pi * x, f)
        result = np.where(reflected, -(pi * pi) / (s * s), f(0)).astype(f)
        v = np.where(reflected, f(1) - x, x)
        for _ in range(6):
            result = result + f(1) / (v * v)
            v = v + f(1)
        ixx = f(1) / (v * v)
        result = result + (f(1) + f(1) / (f(2) * v) + ixx * (f(1 / 6) - ixx * (f(1 / 30) - ixx * f(1 / 42)))) / v
    return sign * result


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042E-16


def zeta(x, q):
    """The Hurwitz zeta function ``sum((k + q) ** -x for k >= 0)`` (Cephes: direct sum up to ``q + 9`` at
    least, then the Euler-Maclaurin tail): inf at ``x = 1`` and at integer ``q <= 0``, NaN for ``x < 1`` and
    for ``q < 0`` with a non-integer ``x``."""
    x, q = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(q, np.float64))
    out = np.full(x.shape, np.nan)
    # (Cephes asks ``x < 1`` before the poles of q: a NaN x at an integer q <= 0 is inf, as torch's; fuzz seed 8663583)
    pole = (x == 1) | (~(x < 1) & (q <= 0) & (q == np.floor(q)))
    out[pole] = np.inf
    ok = (x > 1) & ~pole & ~((q <= 0) & (x != np.floor(x))) & ~np.isnan(q)
    out[ok] = _zeta_sum(x[ok], q[ok])
    return out


def _zeta_sum(x, q):
    """Cephes' zeta for ``x > 1``: the terms ``(q + i) ** -x`` up to ``q + i > 9`` (at least ten), then the
    Euler-Maclaurin tail until its terms are negligible. Cephes also stops the direct sum early where its
    terms are negligible; adding them anyway changes nothing, and lets the sum be one array operation."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        steps = np.maximum(9, np.floor(9 - q) + 1)
        s = np.empty_like(x)
        few = steps == 9
        i = np.arange(10.0)
        s[few] = np.power(q[few, None] + i, -x[few, None]).sum(axis=1)
        for k in np.flatnonzero(~few):  # a negative q: |q| + 10 terms each
            s[k] = np.power(q[k] + np.arange(steps[k] + 1), -x[k]).sum()
        w = q + steps
        b = np.power(w, -x)
        s = s + b * w / (x - 1) - 0.5 * b
        tail = np.ones(x.shape, bool)
        a = np.ones_like(x)
        k = 0.0
        for coefficient in _ZETA_A:
            a = a * (x + k)
            b = b / w
            t = a * b / coefficient
            s = np.where(tail, s + t, s)
            tail &= ~(np.abs(t / s) < _MACHEP)
            k += 1
            a = a * (x + k)
            b = b / w
            k += 1
    return s


@functools.cache
def _root_series(root):
    """zeta(k) (``root`` 1) or zeta(k) - 1 (2) for k = 2 .. 25: lgamma's Taylor series at its roots, made at first
    use rather than at ``import jitorch``."""
    return zeta(np.arange(2.0, _ROOT_TERMS + 2), float(root))


def polygamma(n, x):
    """The ``n``-th derivative of digamma (``n >= 0``): digamma, trigamma, else
    ``(-1)**(n + 1) n! zeta(n + 1, x)`` (`_zeta_integer`)."""
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    return (1.0 if n % 2 else -1.0) * math.exp(math.lgamma(n + 1.0)) * _zeta_integer(n + 1, np.asarray(x, np.float64))


def _power(t, k):
    """``t ** k`` for an integer ``k >= 1`` by repeated squaring (a few products, where ``np.power`` calls pow)."""
    result = None
    square = t
    while True:
        if k & 1:
            result = square.copy() if result is None else result * square
        k >>= 1
        if not k:
            return result
        square = square * square


def _zeta_shift(s):
    """The least ``w`` (9 at least, as Cephes') from which `_zeta_integer`'s 12 Euler-Maclaurin terms give
    ``zeta(s, w)`` to float64: the first term left out, ``2 s (s + 1) ... (s + 24) / (2 pi w)^26`` of the tail's
    ``w^(1 - s) / (s - 1)`` (``(s + 2j)! / (2 pi w)^2j`` grows with ``s``), below 1e-17."""
    rising = math.lgamma(s + 25) - math.lgamma(s - 1)
    return max(9.0, math.exp((rising + math.log(2e17)) / 26) / (2 * math.pi))


def _zeta_integer(s, q):
    """The Hurwitz zeta function of an integer ``s >= 2`` (polygamma's ``n + 1``) at each ``q``: Cephes' scheme
    (`zeta`) with its direct sum over the elements that still need terms, each term ``(q + k) ** -s`` as products
    of ``1 / (q + k)``, up to the first ``w = q + m`` past `_zeta_shift` (none where ``q`` is past it already: Cephes
    sums ten at least, and ``|q|`` more one element at a time for a negative ``q``), and the Euler-Maclaurin tail as
    one polynomial in ``1 / w^2`` (``s`` is one number). inf at the integers ``q <= 0``, NaN at NaN and at +-inf
    (torch's: Cephes' sum meets ``0 * inf`` at ``q = inf``, though the limit is 0)."""
    out = np.full(q.shape, np.nan)
    out[(q <= 0) & (q == np.floor(q))] = np.inf
    ok = np.flatnonzero(np.isfinite(q) & ~((q <= 0) & (q == np.floor(q))))
    q = q[ok]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        m = np.maximum(0.0, np.ceil(_zeta_shift(s) - q))
        total = np.zeros_like(q)
        going = np.flatnonzero(m > 0)
        k = 0
        while going.size:
            total[going] += _power(1 / (q[going] + k), s)
            k += 1
            going = going[m[going] > k]
        w = q + m
        b = np.power(w, -float(s))
        coefficients, rising = [], 1.0
        for i, divisor in enumerate(_ZETA_A):
            rising *= s + 2 * i
            coefficients.append(rising / divisor)
            rising *= s + 2 * i + 1
        u = 1 / (w * w)
        total += b * (w / (s - 1) + 0.5 + polevl(u, coefficients[::-1]) / w)
    out[ok] = total
    return out


# Cephes' Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and exp(-x) sqrt(x) I0(x) on [8, inf), and of I1's
_I0E_A = (
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7, 1.11738753912010371815E-6,
    -4.41673835845875056359E-6, 1.64484480707288970893E-5, -5.75419501008210370398E-5, 1.88502885095841655729E-4,
    -5.76375574538582365885E-4, 1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2, 1.71620901522208775349E-1,
    -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B = (
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17, 3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15, 3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11, 4.94060238822496958910E-10, 3.39623202570838634515E-9, 2.26666899049817806459E-8,
    2.04891858946906374183E-7, 2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1)
_I1E_A = (
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
    7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
    1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7, -8.56872026469545474066E-7,
    3.47025130813767847674E-6, -1.32731636560394358279E-5, 4.78156510755005422638E-5, -1.61760815825896745588E-4,
    5.12285956168575772895E-4, -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
    2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1, -1.76416518357834055153E-1,
    2.52587186443633654823E-1)
_I1E_B = (
    7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17, -3.20952592199342395980E-17,
    2.96262899764595013876E-16, 3.30820231092092828324E-16, -1.88035477551078244854E-15, -3.81440307243700780478E-15,
    1.04202769841288027642E-14, 4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11, 3.25260358301548823856E-11,
    -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9, -2.63146884688951950684E-8,
    -2.51223623787020892529E-7, -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
    7.78576235018280120474E-1)


def _chbevl(x, coefficients):
    """Cephes' Chebyshev series evaluation."""
    b0 = np.full_like(x, coefficients[0])
    b1 = np.zeros_like(x)
    b2 = b1
    for c in coefficients[1:]:
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel_scaled(x, a, b, odd):
    """``exp(-|x|) I(x)`` for I0 (``odd`` False) or I1 from Cephes' two Chebyshev series."""
    ax = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        near = _chbevl(ax / 2 - 2, a) * (ax if odd else 1.0)
        far = _chbevl(32 / ax - 2, b) / np.sqrt(ax)
    r = np.where(ax <= 8, near, far)
    return np.where(x < 0, -r, r) if odd else r


def i0e(x):
    """``exp(-|x|) I0(x)``."""
    return _bessel_scaled(np.asarray(x, np.float64), _I0E_A, _I0E_B, False)


def i1e(x):
    """``exp(-|x|) I1(x)``."""
    return _bessel_scaled(np.asarray(x, np.float64), _I1E_A, _I1E_B, True)


def i0(x):
    """The modified Bessel function of the first kind of order 0."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.abs(x)) * i0e(x)


def i1(x):
    """The modified Bessel function of the first kind of order 1."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.abs(x)) * i1e(x)


# erfinv(y) = ndtri((1 + y) / 2) / sqrt(2): Cephes ndtri's rational approximations (`cephes_tables`), of ``w = y / 2``
# (ndtri's ``p - 1/2``, exact) in the middle and of ``sqrt(-2 log q)``, ``q = (1 - |y|) / 2`` (exact), on the tails
_ERFINV_EDGE = 1 - 2 * 0.13533528323661269189  # |y| where ndtri's p leaves (exp(-2), 1 - exp(-2))
_SQRT_PI = math.sqrt(math.pi)


def _fast_polynomial(z, coefficients):
    """``polevl(z, coefficients)`` for a float64 ``z``: one generated loop (`special_cephes._recurrence`, each step
    a fused multiply-add) where the code generator has registered one, else NumPy's passes."""
    out = special_cephes._recurrence("horner", z, coefficients[1:], coefficients[0], np.float64)
    return polevl(z, coefficients) if out is None else out


def erfinv(y, newton=True):
    """The inverse error function in float64: NaN beyond ``[-1, 1]`` (and at NaN), +-inf at +-1, -0 at -0.

    A first guess from Cephes ndtri's rational approximations (relative error about 5e-16), evaluated where they
    keep their accuracy: of ``y / 2`` itself in the middle (not of ``(1 + y) / 2``, which rounds a small ``y``
    away), and of the exact ``(1 - |y|) / 2`` on the tails; then one Newton step with the C library's ``erf`` in the
    middle and ``erfc`` on the tails, solving ``erfc(|x|) = 1 - |y|`` (exact there) where ``erf(x) - y`` has lost
    most of its digits. Within about 2 ulp of the true value over the whole domain; without the step (``newton``
    False: a result rounded to float32 or a half type, which the first guess's 5e-16 rounds right) 5 ulp."""
    y = np.asarray(y, np.float64)
    a = np.abs(y)
    out = np.full(y.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        middle = np.flatnonzero(a <= _ERFINV_EDGE)
        v = y[middle]
        w2 = v * v
        w2 *= 0.25
        x = _fast_polynomial(w2, NDTRI_P0)
        x /= _fast_polynomial(w2, NDTRI_Q0)
        x *= w2
        x += 1
        x *= v
        x *= 0.5 * _SQRT_PI
        if newton:
            e = special_cephes.libm("erf", x, np.float64)
            e -= v
            x -= e * (0.5 * _SQRT_PI) * np.exp(x * x)
        out[middle] = x
        tail = np.flatnonzero((a > _ERFINV_EDGE) & (a < 1))
        if tail.size:
            v = y[tail]
            complement = 1 - np.abs(v)
            x = np.sqrt(-2 * np.log(complement * 0.5))
            z = 1 / x
            x1 = _fast_polynomial(z, NDTRI_P1) / _fast_polynomial(z, NDTRI_Q1)
            far = np.flatnonzero(x >= 8)  # (|y| within 1e-14 of 1)
            if far.size:
                x1[far] = _fast_polynomial(z[far], NDTRI_P2) / _fast_polynomial(z[far], NDTRI_Q2)
            x = (x - np.log(x) / x - z * x1) * math.sqrt(0.5)  # |erfinv(y)|
            if newton:
                e = special_cephes.libm("erfc", x, np.float64)
                e -= complement
                x += e * (0.5 * _SQRT_PI) * np.exp(x * x)
            out[tail] = np.copysign(x, v)
    out[a == 1] = np.copysign(np.inf, y[a == 1])
    return out
