"""A custom autograd Function, checked with gradcheck, then used in a compiled training step.

    python examples/custom_autograd_function.py
"""

import jitorch as jt


class SoftClip(jt.autograd.Function):
    """y = x / (1 + |x|), with its derivative 1 / (1 + |x|)**2 written by hand."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + x.abs()) ** 2


x = jt.randn(5, dtype=jt.float64, requires_grad=True)
print("gradcheck:", jt.autograd.gradcheck(SoftClip.apply, (x,)))

# Plain ops and autograd: a tiny regression trained with SGD, eagerly and compiled.
jt.manual_seed(0)
data, target = jt.randn(64, 3), jt.randn(64, 1)


def step(w):
    loss = ((jt.tanh(data @ w) - target) ** 2).mean()
    loss.backward()
    with jt.no_grad():
        w.sub_(0.5 * w.grad)
        w.grad = None
    return loss


w_eager = jt.zeros(3, 1, requires_grad=True)
w_compiled = jt.zeros(3, 1, requires_grad=True)
compiled_step = jt.compile(step)
for i in range(5):
    le, lc = step(w_eager), compiled_step(w_compiled)
    print(f"step {i}: eager loss {le.item():.5f}  compiled loss {lc.item():.5f}")
print("kernels of the compiled step (forward, backward and update fused):")
for k in compiled_step.lower(w_compiled).kernels:
    print("  ", ", ".join(k.ops))
