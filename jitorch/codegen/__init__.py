"""Code generation: fused groups of graph nodes become LLVM IR, then machine code."""
