"""A compiled call's matrix products as gemm calls made from words kept between calls.

A compiled step's products read and write the same arena buffers and parameters call after call, yet each ran
`linalg.array_product`'s rules and then NumPy's matmul (split, its parts' gemm calls) in Python, cache-cold between
the kernels: about 30 µs a product in the compiled gpt-4x128 step at one thread (51 products, 41 ms of BLAS).
`product` keeps, per operands' and result's addresses, shapes, strides and dtypes and per product parts
(`threads.product_parts`), the words of the gemm calls that `array_product` makes for them (`linalg.gemm_calls`:
the call NumPy's matmul makes, MKL's where `array_product` would call it, or a split product's parts' calls: the
same bits), and makes those calls natively; where `array_product` makes other calls (a generated kernel's, syrk,
MKL's fixed parts) it runs as before.

Some operands are new memory each call (an eager step's result, such as the fused attention's output, or a weight
gradient that leaves the call), whose address the allocator may or may not give again: in the compiled gpt-4x128
step's first calls up to 6 of 51 products a call met new addresses (the allocator settles after some steps), each
deriving its words again (`gemm_calls`, about 100 µs), as does every call where other allocations come between
steps. The words are also kept per layout (`_layout_key`): the same shapes, strides, dtypes, alignments and parts,
the same answer to whether a and b start at one address (syrk), and the result's bytes apart from both operands'
(NumPy copies an overlapping result first). Those are all that `gemm_calls` decides from beyond the layouts, so operands
of a kept layout at other addresses make the kept calls with their pointers moved (`blas_calls.moved_words`).

`biased_product` makes a product's calls with beta 1 onto its bias, written first (`executor.fold_biases_into_products`:
a linear layer's bias add that was a kernel of its own); those words are kept apart (the key says whether they add).

`whole_words` keeps alike the one call of a product that `interop` runs whole beside another (two threads), whose
words were made anew each call (`whole_gemm`, `gemm_call`: 17 pairs a step in gpt-4x128).
"""

from __future__ import annotations

import numpy as np

from ..ops.linalg import array_product, gemm_calls, whole_gemm
from ..runtime import blas_calls, threads
from ..runtime.array_address import data_address

# (the key above) -> the calls' words (`blas_calls.call_words` arrays), or False where `array_product` makes others
_WORDS: dict = {}
WORDS_LIMIT = 4096  # (past it, all go: buffers at ever new addresses)
# (`_layout_key`) -> (the addresses of a, b and out the words were made for, those words or False)
_LAYOUTS: dict = {}


def product(a, b, out):
    """``out = a @ b`` (arrays) as ``array_product(a, b, out)`` computes it: by the kept words of its gemm calls where
    it makes only such calls."""
    words = _words(a, b, out, threads.product_parts())
    if words is False:
        array_product(a, b, out)
    else:
        blas_calls.run_words(words)


def biased_product(a, b, bias, out):
    """``out = a @ b + bias`` (arrays; ``bias`` broadcast over ``out``'s rows, `executor.fold_biases_into_products`):
    ``bias`` written into ``out`` first, then the kept gemm calls of ``out = a @ b`` made with beta 1 (the product
    added to it: no pass of BLAS clearing ``out``, none adding the bias after); where `array_product` makes other
    calls, the product into ``out`` and the bias added after. Each element is its product's BLAS sum rounded, then
    the bias added and rounded: the bits of the product and add apart, where BLAS sums the inner dim in one block
    (`blas_calls.ADDS_EXACT_MAX_K`)."""
    words = _words(a, b, out, threads.product_parts(), adds=True)
    if words is False:
        array_product(a, b, out)
        np.add(out, bias, out=out)
    else:
        np.copyto(out, bias)
        blas_calls.run_words(words)


def whole_words(a, b, out):
    """The words of the one gemm call that computes ``out = a @ b`` whole (the call `blas_calls.run_gemm_calls` makes
    of `linalg.whole_gemm`'s operands: `interop`'s products run at once, each on one thread), kept as `product`'s
    are; None where it is no such call."""
    words = _words(a, b, out, WHOLE)
    return None if words is False else words[0]


# (the parts of `product`'s keys for `whole_words`' calls)
WHOLE = "whole"


def _words(a, b, out, parts, adds=False):
    """The kept words of ``out = a @ b``'s calls in ``parts`` (`threads.product_parts`, or `WHOLE`), or False where
    `array_product` makes others: made where none are kept; ``adds``: calls that add the product to ``out``
    (`blas_calls.adding_words`)."""
    key = (data_address(a), a.shape, a.strides, a.dtype, data_address(b), b.shape, b.strides, b.dtype,
           data_address(out), out.shape, out.strides, out.dtype, adds, parts)
    words = _WORDS.get(key)
    if words is None:
        if len(_WORDS) >= WORDS_LIMIT:
            _WORDS.clear()
        words = _WORDS[key] = _derived(a, b, out, key)
    return words


def _derived(a, b, out, key):
    """The words of the gemm calls of ``out = a @ b`` (`_made`), or False where it makes others: moved from those
    kept for the same layout (`_layout_key`) where there are any."""
    addresses = key[0], key[4], key[8]
    layout = _layout_key(a, b, out, key)
    kept = None if layout is None else _LAYOUTS.get(layout)
    if kept is not None:
        made_at, words = kept
        if words is False:
            return False
        return blas_calls.moved_words(words, [now - then for now, then in zip(addresses, made_at)])
    made = _made(a, b, out, key[-1])
    if made is not None and key[-2]:
        made = blas_calls.adding_words(made, out.dtype)
    words = False if made is None else made
    if layout is not None:
        if len(_LAYOUTS) >= WORDS_LIMIT:
            _LAYOUTS.clear()
        _LAYOUTS[layout] = addresses, words
    return words


def _made(a, b, out, parts):
    """The words of ``out = a @ b``'s gemm calls in ``parts`` (`_words`), made for these addresses, or None."""
    if parts != WHOLE:
        return gemm_calls(a, b, out)
    plain = whole_gemm(a, b, out)
    words = None if plain is None else blas_calls.call_words(*plain)
    return None if words is None else [words]


def _layout_key(a, b, out, key):
    """What `gemm_calls` decides the calls of ``out = a @ b`` from, but the addresses (``key``: the product's key):
    None where out's bytes may overlap an operand's (each case is then derived at its own addresses)."""
    pa, pb, pc = key[0], key[4], key[8]
    if not (_apart(a, pa, out, pc) and _apart(b, pb, out, pc)):
        return None
    return key[1:4] + key[5:8] + key[9:] + (a.flags.aligned, b.flags.aligned, out.flags.aligned, pa == pb)


def _apart(x, px, y, py):
    """Whether arrays ``x`` and ``y`` (at addresses ``px``, ``py``) span disjoint bytes (an empty one spans none)."""
    x_lo, x_hi = _span(x, px)
    y_lo, y_hi = _span(y, py)
    return x_hi <= y_lo or y_hi <= x_lo


def _span(x, px):
    """The bytes ``[lo, hi)`` that array ``x`` at address ``px`` may touch (empty, ``(px, px)``, where it has no
    element)."""
    if x.size == 0:
        return px, px
    lo = hi = px
    for n, step in zip(x.shape, x.strides):
        if step < 0:
            lo += (n - 1) * step
        else:
            hi += (n - 1) * step
    return lo, hi + x.itemsize
