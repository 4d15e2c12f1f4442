"""A compiled call's matrix products as gemm calls made from words kept between calls.

A compiled step's products read and write the same arena buffers and parameters call after call, yet each ran
`linalg.array_product`'s rules and then NumPy's matmul (split, its parts' gemm calls) in Python, cache-cold between
the kernels: about 30 µs a product in the compiled gpt-4x128 step at one thread (51 products, 41 ms of BLAS).
`product` keeps, per operands' and result's addresses, shapes, strides and dtypes and per product parts
(`threads.product_parts`), the words of the gemm calls that `array_product` makes for them (`linalg.gemm_calls`:
the call NumPy's matmul makes, MKL's where `array_product` would call it, or a split product's parts' calls: the
same bits), and makes those calls natively; where `array_product` makes other calls (a generated kernel's, syrk,
MKL's fixed parts) it runs as before.
"""

from __future__ import annotations

from ..ops.linalg import array_product, gemm_calls
from ..runtime import blas_calls, threads
from ..runtime.array_address import data_address

# (the key above) -> the calls' words (`blas_calls.call_words` arrays), or False where `array_product` makes others
_WORDS: dict = {}
WORDS_LIMIT = 4096  # (past it, all go: buffers at ever new addresses)


def product(a, b, out):
    """``out = a @ b`` (arrays) as ``array_product(a, b, out)`` computes it: by the kept words of its gemm calls where
    it makes only such calls."""
    key = (data_address(a), a.shape, a.strides, a.dtype, data_address(b), b.shape, b.strides, b.dtype,
           data_address(out), out.shape, out.strides, out.dtype, threads.product_parts())
    words = _WORDS.get(key)
    if words is None:
        if len(_WORDS) >= WORDS_LIMIT:
            _WORDS.clear()
        made = gemm_calls(a, b, out)
        words = _WORDS[key] = False if made is None else made
    if words is False:
        array_product(a, b, out)
    else:
        blas_calls.run_words(words)
