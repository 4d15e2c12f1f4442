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
    pb = llvm.create_pass_builder(target_machine, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod
