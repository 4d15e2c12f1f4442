"""The fake driver's lookup of the kernel object behind a PTX text (tests/cuda/fake_driver.py) with the heap
frozen out of the collector, as tests/conftest.py freezes it after collection and after a test that imported
many modules (gc.get_objects() leaves frozen objects out)."""

import gc

import jitorch as jt
from tests.cuda import fake_driver


def test_a_kernel_made_before_a_freeze_is_found_after_it():
    (kernel,) = jt.compile(lambda x: (x * 3).exp() - 1).lower(jt.randn(8, 5), device="cuda").kernels
    ptx = kernel.asm.rstrip("\0")
    gc.collect()
    gc.freeze()
    try:
        assert not any(isinstance(obj, fake_driver.GeneratedKernel) and obj.name == kernel.name
                       for obj in gc.get_objects())
        found = fake_driver._kernel_of(ptx, kernel.name)
        assert isinstance(found, fake_driver.GeneratedKernel)
        assert (found.name, found.asm.rstrip("\0")) == (kernel.name, ptx)
    finally:
        gc.unfreeze()
