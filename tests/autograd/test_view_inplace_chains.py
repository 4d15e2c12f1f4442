"""Random chains of view ops and in-place writes, on bases with and without history, with and without
grad mode, run on torch and on jitorch: every tensor's requires_grad, whether it has a grad_fn, its
version and values after each step, the errors raised (type), and the leaf's gradient through all of
them must be torch's. This guards autograd's view tracking (`autograd.engine.track_views`: a view made
while its base records no history requires grad once an in-place op gives the base one) and the eager
view shortcuts that make views without the general path."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt

# view ops of a tensor of any shape (those that need a shape check it: a refusal is compared too)
VIEWS = {
    "first": lambda T, t: t[0],
    "slice": lambda T, t: t[..., 1:],
    "t": lambda T, t: t.t() if t.dim() <= 2 else t.transpose(0, 1),
    "flat": lambda T, t: t.view(-1),
    "reshape": lambda T, t: t.reshape(-1),
    "flatten": lambda T, t: t.flatten(),
    "unsqueeze": lambda T, t: t.unsqueeze(0),
    "squeeze": lambda T, t: t.unsqueeze(-1).squeeze(-1),
    "permute": lambda T, t: t.permute(*reversed(range(t.dim()))),
    "expand": lambda T, t: t.expand(2, *t.shape),
    "narrow": lambda T, t: t.narrow(-1, 0, 1),
    "diagonal": lambda T, t: t.diagonal(),
    "split": lambda T, t: t.split(1)[0],
    "unbind": lambda T, t: t.unbind()[-1],
    "detach": lambda T, t: t.detach(),
    "alias": lambda T, t: t.view_as(t),
}

# in-place writes; ``s`` is a 0-d value from the leaf (it requires grad) or a plain number. (No zero_ or fill_:
# torch allows them on an expanded tensor, jitorch refuses its internal overlap; documented.)
WRITES = {
    "add": lambda T, t, s: t.add_(s),
    "mul": lambda T, t, s: t.mul_(s),
    "copy": lambda T, t, s: t.copy_(T.full_like(t, s) if isinstance(s, (int, float)) else s.expand(t.shape)),
    "setitem": lambda T, t, s: t.__setitem__(..., s),
    "exp": lambda T, t, s: t.exp_(),
    "relu": lambda T, t, s: t.relu_(),
}

BASES = {
    "zeros": lambda T, x: T.zeros(3, 4),
    "history": lambda T, x: x * 2,
    "leaf": lambda T, x: x,
    "detached": lambda T, x: x.detach().clone(),
    "ints": lambda T, x: T.arange(12).view(3, 4),
}

# Views are made with and without grad mode: torch's view made in no_grad mode requires grad while its base does,
# and may not be used with history once its memory was written (`autograd.engine.no_grad_views`).
step = st.one_of(
    st.tuples(st.just("view"), st.sampled_from(sorted(VIEWS)), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("write"), st.sampled_from(sorted(WRITES)), st.integers(0, 20), st.sampled_from(["leaf", "num"]),
              st.booleans()),
)


def has_grad_fn(t):
    """Whether ``t`` has a grad_fn, or "forbidden" for a view whose history may not be rebased (an output of
    ``split`` or ``unbind``, a view made in no_grad mode) after a write into its memory: torch raises reading its
    grad_fn, jitorch when it is used (`autograd.engine.gradient_edge`: its memory is newer than its history)."""
    try:
        fn = t.grad_fn
    except RuntimeError:
        return "forbidden"
    if isinstance(t, jt.Tensor) and t.requires_grad and "_creation_meta" in t.__dict__ and (
            t.__dict__.get("_view_version") != t._version):
        return "forbidden"
    return fn is not None


def run(T, base, steps):
    """The program on module ``T``: what each step saw (an error's type, or the state of every tensor), the
    values of every tensor after each step that raised nothing, and the leaf's gradient through the sum of
    every floating tensor made (or the error backward raised)."""
    x = T.tensor([[1.0, -2.0, 3.0, 0.5], [0.25, 2.0, -1.0, 4.0], [1.5, -0.5, 2.5, -3.0]], requires_grad=True)
    pool = [BASES[base](T, x)]
    seen, values = [], []
    for kind, name, pick, *rest in steps:
        t = pool[pick % len(pool)]
        no_grad = rest[-1]
        try:
            with T.no_grad() if no_grad else T.enable_grad():
                if kind == "view":
                    pool.append(VIEWS[name](T, t))
                else:
                    if t.dtype.is_floating_point:
                        s = x[1, 2] * 0.5 if rest[0] == "leaf" else 0.75
                    elif name == "exp":  # (no in-place exp of integers, in torch either)
                        continue
                    else:
                        s = 2  # (an int tensor takes no float value in place)
                    WRITES[name](T, t, s)
        except (RuntimeError, IndexError) as e:
            seen.append(("error", type(e).__name__))
            continue
        seen.append([(u.requires_grad, has_grad_fn(u), u._version, tuple(u.shape), u._base is None) for u in pool])
        values.append([u.detach().numpy().astype(np.float64).copy() for u in pool])
    floats = [u for u in pool if u.dtype.is_floating_point]
    try:
        loss = sum((u * (k + 1)).sum() for k, u in enumerate(floats))
        if floats and loss.requires_grad:
            loss.backward()
        grad = None if x.grad is None else x.grad.numpy().copy()
    except RuntimeError as e:
        grad = ("error", type(e).__name__)
    return seen, values, grad


@settings(max_examples=60)
@given(base=st.sampled_from(sorted(BASES)), steps=st.lists(step, min_size=1, max_size=6))
def test_chains_of_views_and_inplace_writes_match_torch(base, steps):
    want, want_values, want_grad = run(torch, base, steps)
    got, got_values, got_grad = run(jt, base, steps)
    assert got == want
    for g, w in zip(got_values, want_values):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-5)
    assert (got_grad is None) == (want_grad is None)
    if isinstance(want_grad, np.ndarray):
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5)
    else:
        assert got_grad == want_grad


def test_view_made_before_the_base_gains_history_reads_it():
    # the shortcut views of each view op, made on a base without history, then the base written with grad
    for name in sorted(VIEWS):
        found = []
        for T in (torch, jt):
            x = T.tensor([[1.0, 2.0, 3.0, 4.0]] * 3, requires_grad=True)
            b = T.zeros(3, 4)
            v = VIEWS[name](T, b)
            try:
                b.mul_(2).add_(x)
                out = (v.requires_grad, v._version, (v * 3).sum().requires_grad)
                if out[0]:
                    (v * 3).sum().backward()
                    out += (x.grad.numpy().tolist(),)
            except RuntimeError as e:
                out = type(e).__name__
            found.append(out)
        assert found[1] == found[0], name
