"""torch.distributed's object collectives, without pickle: objects travel as JSON that keeps their types.

torch pickles the objects, so a rank can run code of another's choosing; jitorch encodes them instead. None,
booleans, ints, floats (NaN and infinities too), strings and lists are JSON's own; tuples, dicts (with keys of
any of these types) and bytes travel tagged, so that each arrives as the type it left as (plain JSON would
turn a tuple into a list and an int key into a string). Any other type, a subclass included (an IntEnum, a
NumPy scalar), raises TypeError before anything is sent: it would arrive as another type.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from .collectives import _StatusRequest, _agree, _offsets, _root
from .mpi_backend import mpi, wait
from .process_group import members_only, resolve

_SCALARS = (type(None), bool, int, float, str)
_KINDS = "None, bool, int, float, str, bytes, list, tuple and dict"


def _tagged(obj, what):
    """``obj`` as a value JSON can write, each tuple, dict and bytes as a one-key object naming its type."""
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if kind is list:
        return [_tagged(v, what) for v in obj]
    if kind is tuple:
        return {"tuple": [_tagged(v, what) for v in obj]}
    if kind is dict:
        return {"dict": [[_tagged(k, what), _tagged(v, what)] for k, v in obj.items()]}
    if kind is bytes:
        return {"bytes": base64.b64encode(obj).decode("ascii")}
    raise TypeError(f"{what}: jitorch sends objects as JSON, never pickled, and keeps {_KINDS} (not subclasses); "
                    f"got {kind.__module__}.{kind.__qualname__}")


def _untagged(value):
    if type(value) is list:
        return [_untagged(v) for v in value]
    if type(value) is not dict:
        return value
    if len(value) != 1:
        raise ValueError(f"not an encoded object: {value!r}")
    (kind, body), = value.items()
    if kind == "tuple":
        return tuple(_untagged(v) for v in body)
    if kind == "dict":
        return {_hashable(_untagged(k)): _untagged(v) for k, v in body}
    if kind == "bytes":
        return base64.b64decode(body, validate=True)
    raise ValueError(f"not an encoded object: {value!r}")


def _hashable(key):
    if type(key) in (list, dict):  # a sender's dict never had such a key: the bytes were not ours
        raise ValueError(f"not an encoded object: a dict key {key!r}")
    return key


def encode(obj, what="encode"):
    """The bytes that carry ``obj`` (TypeError for a type they cannot keep)."""
    return json.dumps(_tagged(obj, what), allow_nan=True, separators=(",", ":")).encode()


def decode(data):
    """The object ``encode`` made ``data`` of."""
    return _untagged(json.loads(data))


def _all_bytes(pg, data, what):
    """Every rank's ``data`` (bytes), in group-rank order."""
    sizes = np.empty(pg.size(), np.int64)
    wait(pg.comm.Iallgather(np.array([len(data)], np.int64), sizes), pg.timeout, what)
    received = np.empty(int(sizes.sum()), np.uint8)
    wait(pg.comm.Iallgatherv(np.frombuffer(data, np.uint8), [received, (sizes, _offsets(sizes))]), pg.timeout, what)
    return [received[o:o + n].tobytes() for o, n in zip(_offsets(sizes), sizes)]


@members_only
def all_gather_object(object_list, obj, group=None):
    """Every rank's ``obj`` into ``object_list[rank]`` (see the module for the types that travel)."""
    what = "all_gather_object"
    pg = resolve(group)
    data = encode(obj, what)
    _agree(pg, "object", None, what)
    for rank, data in enumerate(_all_bytes(pg, data, what)):
        object_list[rank] = decode(data)


@members_only
def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Every rank's ``obj`` into ``object_gather_list[rank]`` on rank ``dst`` (which alone gives the list)."""
    what = "gather_object"
    pg = resolve(group)
    root = _root(pg, dst, group_dst)
    if pg.rank() == root and (object_gather_list is None or len(object_gather_list) < pg.size()):
        raise ValueError(f"{what}: the destination rank needs an object_gather_list of {pg.size()} entries")
    data = encode(obj, what)
    _agree(pg, "object", None, what)
    everyone = _all_bytes(pg, data, what)
    if pg.rank() == root:
        for rank, data in enumerate(everyone):
            object_gather_list[rank] = decode(data)


@members_only
def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Rank ``src``'s ``object_list`` into every rank's (in place)."""
    what = "broadcast_object_list"
    pg = resolve(group)
    root = _root(pg, src, group_src)
    data = encode(list(object_list), what) if pg.rank() == root else b""
    _agree(pg, "object", None, what)
    values = decode(_all_bytes(pg, data, what)[root])
    if len(values) != len(object_list):
        raise ValueError(f"{what}: rank {pg.ranks[root]} sent {len(values)} objects into a list of "
                         f"{len(object_list)}")
    object_list[:] = values


@members_only
def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None):
    """``scatter_object_input_list[r]`` of rank ``src`` into ``scatter_object_output_list[0]`` of rank r."""
    what = "scatter_object_list"
    pg = resolve(group)
    root = _root(pg, src, group_src)
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("Expected argument scatter_object_output_list to be a list of size at least 1.")
    data = b""
    if pg.rank() == root:
        if scatter_object_input_list is None or len(scatter_object_input_list) != pg.size():
            raise ValueError(f"{what}: the source rank needs a scatter_object_input_list of {pg.size()} objects")
        data = encode(list(scatter_object_input_list), what)
    _agree(pg, "object", None, what)
    values = decode(_all_bytes(pg, data, what)[root])
    scatter_object_output_list[0] = values[pg.rank()]


@members_only
def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None):
    """Send ``object_list`` to rank ``dst``, whose ``recv_object_list`` takes it."""
    pg = resolve(group)
    peer = _peer(pg, dst, group_dst, "destination")
    data = np.frombuffer(encode(list(object_list), "send_object_list"), np.uint8)
    size = np.array([len(data)], np.int64)
    wait(pg.comm.Isend(size, dest=peer, tag=_TAG), pg.timeout, "send_object_list")
    wait(pg.comm.Isend(data, dest=peer, tag=_TAG), pg.timeout, "send_object_list")


@members_only
def recv_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Receive a ``send_object_list`` from rank ``src`` (any rank when None) into ``object_list``, in place;
    returns the sender's rank."""
    what = "recv_object_list"
    pg = resolve(group)
    source = mpi().ANY_SOURCE if src is None and group_src is None else _peer(pg, src, group_src, "source")
    size, status = np.empty(1, np.int64), mpi().Status()
    request = pg.comm.Irecv(size, source=source, tag=_TAG)
    wait(_StatusRequest(request, status), pg.timeout, what)
    sender = status.Get_source()
    data = np.empty(int(size[0]), np.uint8)
    wait(pg.comm.Irecv(data, source=sender, tag=_TAG), pg.timeout, what)
    values = decode(data.tobytes())
    if len(values) != len(object_list):
        raise ValueError(f"{what}: rank {pg.ranks[sender]} sent {len(values)} objects into a list of "
                         f"{len(object_list)}")
    object_list[:] = values
    return pg.ranks[sender]


_TAG = 0x6A74  # the object messages' own tag: a tensor send to the same rank cannot be taken for one


def _peer(pg, global_rank, group_rank, role):
    peer = _root(pg, global_rank, group_rank)
    if peer == pg.rank():
        raise ValueError(f"Invalid {role} rank: {role} rank should not be the same as the rank of the current "
                         "process.")
    return peer
