"""A compiled call's matrix products as gemm calls made from words kept between calls.

A compiled step's products read and write the same arena buffers and parameters call after call, yet each ran
`linalg.array_product`'s rules and then NumPy's matmul in Python, cache-cold between the kernels: about 30 µs a
product in the compiled gpt-4x128 step at one thread (51 products, 41 ms of BLAS). `product` keeps, per operands'
and result's addresses, shapes, strides and dtypes and per product parts (`threads.product_parts`), the words of the
one gemm call that `array_product` makes for them (`linalg.one_gemm_words`: the call NumPy's matmul makes, or MKL's
where `array_product` would call it, the same bits), and makes that call natively; where `array_product` makes no
single gemm call (a product split on the team, a generated kernel's, syrk, MKL's fixed parts) it runs as before.
"""

from __future__ import annotations

from ..ops.linalg import array_product, one_gemm_words
from ..runtime import blas_calls, threads
from ..runtime.array_address import data_address

# (the key above) -> the call's words (an int64 array), or False where `array_product` makes no such call
_WORDS: dict = {}
WORDS_LIMIT = 4096  # (past it, all go: buffers at ever new addresses)


def product(a, b, out):
    """``out = a @ b`` (arrays) as ``array_product(a, b, out)`` computes it: through the kept words of its one gemm
    call where it makes one."""
    key = (data_address(a), a.shape, a.strides, a.dtype, data_address(b), b.shape, b.strides, b.dtype,
           data_address(out), out.shape, out.strides, out.dtype, threads.product_parts())
    words = _WORDS.get(key)
    if words is None:
        if len(_WORDS) >= WORDS_LIMIT:
            _WORDS.clear()
        made = one_gemm_words(a, b, out)
        words = _WORDS[key] = False if made is None else made
    if words is False:
        array_product(a, b, out)
    else:
        blas_calls.run_words(words)
