"""Shrinks a failing fuzz program while it keeps failing the same way.

Steps, each kept only if torch still runs the program and the check still finds a mismatch with the same
key (modes, call, kind of difference): drop statements one at a time, last first; drop outputs; drop
captured tensors and scalars nothing reads; lay every input out contiguously; drop the gradient run.
"""

from __future__ import annotations

from dataclasses import replace

from .generator import valid
from .oracle import check


def _fails(program, key, modes, grad_modes):
    if not valid(program):
        return False
    found = check(program, modes, grad_modes if program.grad else ()).mismatches
    return any(m.key() == key for m in found)


def minimise(program, mismatch, modes, grad_modes=("torch", "eager", "compiled"), budget=200):
    """The smallest program found (within ``budget`` checks) that still fails like ``mismatch``."""
    key = mismatch.key()
    if key[2] != "grad":
        grad_modes = ()
        program = replace(program, grad=False)
    checks = [0]

    def fails(candidate):
        if checks[0] >= budget:
            return False
        checks[0] += 1
        return _fails(candidate, key, modes, grad_modes)

    changed = True
    while changed and checks[0] < budget:
        changed = False
        for i in reversed(range(len(program.body))):
            candidate = program.with_body(program.body[:i] + program.body[i + 1:])
            if fails(candidate):
                program, changed = candidate, True
        for i in reversed(range(len(program.outputs))):
            candidate = program.with_body(program.body, program.outputs[:i] + program.outputs[i + 1:])
            if fails(candidate):
                program, changed = candidate, True
    simpler = True
    while simpler:
        simpler = next((c for c in _simpler_declarations(program) if fails(c)), None)
        program = simpler or program
    return program


def _simpler_declarations(program):
    """Variants of ``program`` without one unread captured tensor or scalar, or with contiguous inputs."""
    text = "\n".join(line for s in program.body for line in s.lines) + " ".join(program.outputs)
    for i, c in enumerate(program.captured):
        if c.name not in text:
            yield replace(program, captured=program.captured[:i] + program.captured[i + 1:])
    for i, s in enumerate(program.scalars):
        if s.name not in text:
            yield replace(program, scalars=program.scalars[:i] + program.scalars[i + 1:])
    plain = tuple(tuple("contiguous" for _ in call) for call in program.layouts)
    if program.layouts != plain:
        yield replace(program, layouts=plain)
