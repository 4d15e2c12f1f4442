"""torch's ``torch.distributed.device_mesh``: ranks laid out in an n-dimensional array, with a process group for
each dimension.

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    mesh["dp"].get_group()        # the ranks that share this rank's "tp" coordinate

Along dimension ``d``, the ranks whose coordinates differ only in ``d`` form one group; each process belongs to
one such group per dimension. The groups are made with `new_group` when the mesh is made (every process calls it
for every group, as `new_group` requires), so ``get_group``, ``get_local_rank`` and slicing start no
communication. A mesh sliced by names (``mesh["dp"]``) shares its root's groups.
"""

from __future__ import annotations

import numpy as np

from .. import from_numpy
from .process_group import GroupMember, _backend_name, get_rank, get_world_size, init_process_group, \
    is_initialized, new_group

__all__ = ["DeviceMesh", "init_device_mesh"]


class DeviceMesh:
    """``mesh`` (nested lists, an array or an integer tensor of global ranks, each rank once) on devices of
    ``device_type`` ("cpu" or "cuda"), with a process group per dimension, named by ``mesh_dim_names`` where
    given. Every process of the world makes the mesh, members or not (a process outside it belongs to no group of
    it: ``get_coordinate()`` is None). ``backend_override`` maps a dimension (its index or name) to the backend
    of its groups (a backend's name, as ``new_group`` takes it). The default process group is made when there is
    none yet."""

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, backend_override=None, _init_backend=True):
        ranks = np.array(mesh.tolist() if hasattr(mesh, "tolist") else mesh, dtype=np.int64)
        if ranks.ndim == 0 or ranks.size == 0:
            raise ValueError(f"DeviceMesh needs at least one rank in an array of at least one dimension, got "
                             f"{ranks.tolist()}")
        if len(np.unique(ranks)) != ranks.size:
            raise ValueError(f"DeviceMesh's mesh {ranks.tolist()} names a rank more than once")
        names = tuple(mesh_dim_names) if mesh_dim_names else None
        _check_names(names, ranks.shape)
        if not is_initialized():
            init_process_group()
        world = get_world_size()
        if ranks.size > world or ranks.min() < 0 or ranks.max() >= world:
            raise RuntimeError(f"Mesh should not be bigger than default world size {world}, but found "
                               f"{ranks.size} ranks!" if ranks.size > world else
                               f"DeviceMesh's mesh {ranks.tolist()} names ranks outside a world of {world}")
        self._device_type = str(device_type)
        self._ranks = ranks
        self._mesh_dim_names = names
        self._dims = tuple(range(ranks.ndim))  # the root's dimensions this mesh spans, in this mesh's order
        self._root = self
        where = np.argwhere(ranks == get_rank())
        self._coordinate = tuple(int(c) for c in where[0]) if len(where) else None
        backends = _backends(backend_override, names, ranks.ndim)
        self._groups = [self._group_along(d, backends[d]) for d in range(ranks.ndim)] if _init_backend else None

    def _group_along(self, dim, backend):
        """This process's group along root dimension ``dim`` (GroupMember.NON_GROUP_MEMBER outside the mesh):
        one `new_group` per line of the mesh along ``dim``, all made by every process in one order."""
        lines = np.moveaxis(self._ranks, dim, -1).reshape(-1, self._ranks.shape[dim])
        mine = GroupMember.NON_GROUP_MEMBER
        for line in lines:
            group = new_group([int(r) for r in line], backend=backend, sort_ranks=False)
            if group is not GroupMember.NON_GROUP_MEMBER:
                mine = group
        return mine

    @property
    def device_type(self):
        """The devices' type ("cpu" or "cuda")."""
        return self._device_type

    @property
    def mesh(self):
        """The mesh's ranks as an int32 tensor; a sliced mesh's are those that share this rank's coordinates
        in the dimensions sliced away (RuntimeError on a rank outside its root mesh)."""
        return from_numpy(np.ascontiguousarray(self._array(), dtype=np.int32))

    def _array(self):
        if self._root is self:
            return self._ranks
        if self._coordinate is None:
            raise RuntimeError("In order to get the mesh Tensor of a DeviceMesh it needs to either have all its "
                               "original dimensions (e.g., no slicing) or it needs to contain the local rank")
        # (a slice's dimensions keep their root's order: `__getitem__` refuses others, as torch does)
        return self._root._ranks[tuple(slice(None) if d in self._dims else c for d, c in enumerate(self._coordinate))]

    @property
    def mesh_dim_names(self):
        """The dimensions' names (a tuple), or None."""
        return self._mesh_dim_names

    @property
    def ndim(self):
        return len(self._dims)

    @property
    def shape(self):
        return tuple(int(self._root._ranks.shape[d]) for d in self._dims)

    def size(self, mesh_dim=None):
        """How many ranks the mesh holds, or along dimension ``mesh_dim`` (an index)."""
        return int(np.prod(self.shape)) if mesh_dim is None else self.shape[mesh_dim]

    def _dim(self, mesh_dim, what):
        """The index of ``mesh_dim`` (an index or a name) in this mesh; None means the only one."""
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional kwarg `mesh_dim` "
                                   f"needs to be specified when device_mesh.ndim > 1 ({what}).")
            return 0
        if isinstance(mesh_dim, str):
            if not self._mesh_dim_names:
                raise KeyError("No `mesh_dim_names` found.")
            if mesh_dim not in self._mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh dimensions are: "
                               f"mesh_dim_names={self._mesh_dim_names}")
            return self._mesh_dim_names.index(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"mesh_dim {mesh_dim} is out of range for a DeviceMesh of {self.ndim} dimensions")
        return mesh_dim % self.ndim

    def get_group(self, mesh_dim=None):
        """The process group along ``mesh_dim`` (an index or a name; None for a 1-D mesh) that this rank is in."""
        if self._root._groups is None:
            raise RuntimeError("DeviceMesh process groups not initialized!")
        return self._root._groups[self._dims[self._dim(mesh_dim, "get_group")]]

    def get_all_groups(self):
        """This rank's process group along each dimension."""
        return [self.get_group(d) for d in range(self.ndim)]

    def get_rank(self):
        """This process's global rank."""
        return get_rank()

    def get_local_rank(self, mesh_dim=None):
        """This process's rank in its group along ``mesh_dim`` (its coordinate there)."""
        return get_rank(self.get_group(self._dim(mesh_dim, "get_local_rank")))

    def get_coordinate(self):
        """This rank's index in each of the mesh's dimensions, or None when it is not in the mesh."""
        if self._coordinate is None:
            return None
        return tuple(self._coordinate[d] for d in self._dims)

    def _get_root_mesh(self):
        return self._root

    def __getitem__(self, mesh_dim_names):
        """The mesh of the dimensions named (a name or a tuple of names, in the order they have here): this
        rank's slice, sharing the root's groups."""
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == self._mesh_dim_names:
            return self
        if not all(name in self._mesh_dim_names for name in names) or len(set(names)) != len(names):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names are "
                           f"{list(self._mesh_dim_names)}.")
        dims = [self._dims[self._mesh_dim_names.index(name)] for name in names]
        if dims != sorted(dims):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Mesh dim indices should be in ascending "
                           "order.")
        sub = object.__new__(DeviceMesh)
        sub.__dict__.update(self.__dict__)
        sub._dims, sub._mesh_dim_names, sub._root = tuple(dims), names, self._root
        return sub

    def _key(self):
        return self._root._ranks.tobytes(), self._root._ranks.shape, self._dims, self._device_type, \
            self._mesh_dim_names

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        sizes = self.shape
        shown = f"({', '.join(f'{n}={s}' for n, s in zip(self._mesh_dim_names, sizes))})" \
            if self._mesh_dim_names else str(sizes)
        root = self._root._ranks.shape
        strides = tuple(int(np.prod(root[d + 1:])) for d in self._dims)
        return f"DeviceMesh({shown}, '{self._device_type}', stride={strides})"


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A `DeviceMesh` of ``mesh_shape`` over the first ranks of the world in order (rank ``i`` at row-major
    position ``i``), its dimensions named by ``mesh_dim_names``; makes the default process group when there is
    none yet. ``device_type`` is a type without an index ("cpu", "cuda")."""
    shape = tuple(int(s) for s in mesh_shape)
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
    _check_names(names, shape)
    if device_type and not str(device_type).isalpha():
        raise RuntimeError(f"Device type with index is not supported but got {device_type}. If you maintained a "
                           "'torch.device' object, it's recommended to pass in 'device.type'.")
    return DeviceMesh(device_type, np.arange(int(np.prod(shape))).reshape(shape), mesh_dim_names=names,
                      backend_override=backend_override)


def _check_names(names, shape):
    if names is None:
        return
    if len(set(names)) != len(names):
        raise RuntimeError(f"Each mesh_dim_name must be unique. Found repeated mesh_dim_name in mesh_dim_names "
                           f"{names}")
    if len(names) != len(shape):
        raise RuntimeError(f"mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): "
                           f"{len(names)} and len(mesh_shape):{len(shape)}.")


def _backends(override, names, ndim):
    """Each dimension's backend for ``new_group`` (None: the world's), from ``backend_override``."""
    backends = [None] * ndim
    for key, value in (override or {}).items():
        dim = names.index(key) if isinstance(key, str) and names and key in names else key
        if not isinstance(dim, int) or not -ndim <= dim < ndim:
            raise KeyError(f"backend_override names dimension {key!r}, which a mesh of {ndim} dimensions named "
                           f"{names} does not have")
        if not isinstance(value, str):
            raise TypeError(f"backend_override gives dimension {key!r} {value!r}: jitorch takes a backend's name "
                            "(its groups have no options)")
        backends[dim % ndim] = _backend_name(value)
    return backends
