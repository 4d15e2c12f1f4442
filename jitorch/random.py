"""``torch.random``'s path: seeding the default generator and every device's."""

from jitorch.ops.random_ops import default_generator, initial_seed, manual_seed, seed

__all__ = ["default_generator", "initial_seed", "manual_seed", "seed"]
