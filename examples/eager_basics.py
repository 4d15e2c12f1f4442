"""Eager jitorch with PyTorch habits: create, view, compute, reduce, index, share with NumPy.

    python examples/eager_basics.py
"""

import numpy as np

import jitorch as torch  # a torch user's script runs with this one change

torch.manual_seed(0)

# Creation and dtypes
x = torch.arange(12, dtype=torch.float32).view(3, 4)
print("x =", x)
print("shape", x.shape, "strides", x.stride(), "dtype", x.dtype)

# Views never copy: a write through the transpose shows in x
xt = x.t()
xt[0, 1] = 100.0
print("after xt[0, 1] = 100, x[1, 0] =", x[1, 0].item(), "| shares storage:",
      xt.untyped_storage().data_ptr() == x.untyped_storage().data_ptr())

# Broadcasting and type promotion follow torch
ints = torch.tensor([1, 2, 3])
print("int64 tensor + 0.5 ->", (ints + 0.5).dtype, "| int tensor / 2 ->", (ints / 2))

# Reductions, with dim and keepdim
print("row sums", x.sum(dim=1), "| column max", x.max(dim=0).values)
print("softmax rows", torch.softmax(x[:, :2], dim=1))

# Linear algebra
w = torch.randn(4, 2)
print("x @ w ->", (x @ w).shape)

# Indexing: masks and integer tensors copy, slices view
mask = x > 5
print("x[x > 5] ->", x[mask])
print("gather ->", torch.gather(x, 1, torch.tensor([[0], [1], [2]])).flatten())

# NumPy shares memory both ways on CPU
a = np.zeros(3, dtype=np.float32)
t = torch.from_numpy(a)
t += 1
print("numpy array after t += 1:", a)
