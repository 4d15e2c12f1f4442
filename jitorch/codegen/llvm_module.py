"""A kernel's LLVM module parsed, verified and optimised (O3) for a target machine: the one pipeline the CPU
and the NVPTX targets share (they differ in the machine and what they emit from the result)."""

from __future__ import annotations


def optimised_module(module_text, triple, target_machine):
    """The verified, O3-optimised llvmlite module of ``module_text`` for ``target_machine``."""
    import llvmlite.binding as llvm
    return optimise_module(llvm.parse_assembly(module_text), triple, target_machine)


def optimise_module(mod, triple, target_machine):
    """``mod`` (a parsed llvmlite module) verified and O3-optimised in place for ``target_machine``."""
    import llvmlite.binding as llvm
    mod.triple = triple
    mod.data_layout = str(target_machine.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    # A pass builder per run: each run registers callbacks on the builder that point into that run's
    # analysis managers, so a builder used twice would call into freed memory.
    pb = llvm.create_pass_builder(target_machine, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        dispose_pass_manager(mpm)
    return mod


def dispose_pass_manager(mpm):
    """Free a pass manager's pipeline now. llvmlite 0.50 never frees one: its ``ModulePassManager`` lists
    ``ObjectRef`` first among its bases, whose empty ``_dispose`` hides the one that deletes the pipeline,
    so each O3 run left about 70 KB of passes behind. So the first ``_dispose`` of its classes other than
    ``ObjectRef``'s is called (0.44 defines it on ``ModulePassManager`` itself), then the object detached,
    so that nothing frees it twice."""
    from llvmlite.binding import ffi
    if mpm.closed:
        return
    dispose = next(cls.__dict__["_dispose"] for cls in type(mpm).__mro__
                   if "_dispose" in cls.__dict__ and cls is not ffi.ObjectRef)
    dispose(mpm)
    mpm.detach()
