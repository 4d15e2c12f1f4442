"""Counted loops as basic blocks, which every hand-written kernel and the kernel builder emit, and their
``llvm.loop`` metadata."""

from __future__ import annotations

from llvmlite import ir

I64 = ir.IntType(64)


def counted_loop(b, lo, hi, step, body, name="l"):
    """``for (i = lo; i < hi; i += step) body(b, i)`` over i64 values, as basic blocks; ``step`` None: the
    step is what ``body`` returns (an iteration that decides how far it went). Returns the loop's back-edge
    branch, which carries the loop's ``llvm.loop`` metadata where it is given some."""
    func = b.function
    head, loop, done = (func.append_basic_block(name + suffix) for suffix in ("", ".body", ".end"))
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(lo, pre)
    b.cbranch(b.icmp_signed("<", i, hi), loop, done)
    b.position_at_end(loop)
    advance = body(b, i)
    i.add_incoming(b.add(i, step if step is not None else advance), b.block)
    latch = b.branch(head)
    b.position_at_end(done)
    return latch


def loop_metadata(module, *entries):
    """A loop's ``llvm.loop`` metadata node of ``entries`` ((name,) or (name, int or bool value))."""
    def entry(name, *value):
        args = [ir.MetaDataString(module, name)]
        if value:
            args.append(ir.IntType(1)(value[0]) if isinstance(value[0], bool) else ir.IntType(32)(value[0]))
        return module.add_metadata(args)
    return _loop_node(module, [entry(*e) for e in entries])


def _loop_node(module, entry_nodes):
    # A node of its own: llvmlite's ``add_metadata([])`` gives one node per module, whose operands each call
    # then overwrote, so every loop of a kernel took the last call's entries.
    node = ir.values.MDValue(module, [], name=str(len(module.metadata)))
    node.operands = (node, *entry_nodes)  # (a loop's ID names itself first)
    return node


_ROLLED = "llvm.loop.unroll.disable"


def keep_rolled(module):
    """Mark every loop of ``module``'s functions ``llvm.loop.unroll.disable`` (keeping the metadata a loop has):
    a back edge is a branch to a block made before its own, as `counted_loop` and the hand-written loops make
    them (a forward branch that also reads so only gets metadata LLVM ignores: it reads a loop's at its
    latches). Must run before the module is first written out: llvmlite keeps an instruction's text once made."""
    rolled = module.add_metadata([ir.MetaDataString(module, _ROLLED)])
    for function in module.functions:
        order = {block: i for i, block in enumerate(function.blocks)}
        for i, block in enumerate(function.blocks):
            branch = block.instructions[-1] if block.is_terminated else None
            if not isinstance(branch, (ir.instructions.Branch, ir.instructions.ConditionalBranch)):
                continue
            if not any(order.get(target, i + 1) <= i for target in branch.operands):
                continue
            kept = branch.metadata.get("llvm.loop")
            entries = list(kept.operands[1:]) if kept is not None else []
            if not any(getattr(e.operands[0], "string", None) == _ROLLED for e in entries if e.operands):
                branch.set_metadata("llvm.loop", _loop_node(module, entries + [rolled]))
