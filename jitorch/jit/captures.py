"""The Python state a traced function reaches from outside: its closure cells, the globals its code names
(and those of the plain Python functions and methods it reaches through them), and the attribute chains
rooted in them (``M.t1``, ``self.cfg.scale``, ``M.sub.w``, a module's parameters).

Guards: a graph bakes in what that state held when it was traced (a number as a literal, a tensor as a
constant), so a call after part of it is rebound must trace again, as torch.compile's guards make it.
Numbers, strings and None are guarded by value; tensors and other objects by identity, so an in-place
change of a captured tensor (an optimizer step) still needs no new trace. A chain is re-read at each
guard check through instance dictionaries only (never properties or ``__getattr__`` code). The captured
tensors' geometry is guarded too (`geometry_guard`): reshaping one outside the function (``c.t_()``,
``c.data = other``) traces again. What code reads without an attribute load (``W[0]``, ``for w in W``,
``cfg["s"]``, a ``ModuleList`` iterated by library code) is guarded by one check of the containers, module
tables and objects it reaches (`CapturedState._explore`, `_Contents`); so are the objects the compiled call
receives as arguments, and a built-in module's hyperparameters. Exploration stops after ``_MAX_NODES``
objects: state reached only beyond that is not guarded.

Snapshot: traced code may store what it computes in that state (``M.cache = t``, ``self.mask = t``,
``lst.append(t)``). A traced tensor left there would break every later use, so `CapturedState` records the
tables (globals, instance dictionaries, lists, dicts, cells) before the trace and puts them back when
one ends up holding one.
"""

from __future__ import annotations

import dis
import functools
import sys
import types
from collections import deque
from itertools import chain
from operator import eq, is_

from ..tensor import GEOMETRY_EPOCH, Tensor

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MISSING = object()
_ROOT_OPS = {"LOAD_GLOBAL": "global", "LOAD_DEREF": "deref", "LOAD_FAST": "fast", "LOAD_FAST_CHECK": "fast"}
_CHAIN_OPS = ("LOAD_ATTR", "LOAD_METHOD")
# jitorch's own machinery: its objects hold no user state a graph depends on
_INTERNAL = ("jitorch.jit", "jitorch.ir", "jitorch.codegen", "jitorch.runtime", "jitorch.autograd",
             "jitorch.ops", "jitorch.export", "jitorch.tensor")
_LOOKUP_ERRORS = (LookupError, AttributeError, TypeError)
_object_dict = object.__getattribute__
_MAX_NODES = 20000  # objects visited looking for captured tensors (a huge dataset list stays cheap)
_MODULE_TABLES = ("_parameters", "_buffers", "_modules")


class _Path:
    """How to re-read one object from the function's roots: ``read()`` gives it now (or ``_MISSING``);
    ``text`` names it in guards (``global M.t1``), ``name`` in messages (``M.t1``)."""

    __slots__ = ("text", "name", "root", "steps")

    def __init__(self, text, name, root, steps=()):
        self.text = text
        self.name = name
        self.root = root    # reads the root object (a cell's contents, a global, the bound object)
        self.steps = steps  # (getter, key): each getter raises one of _LOOKUP_ERRORS when there is nothing

    def then(self, get, key, text):
        return _Path(self.text + text, self.name + text, self.root, self.steps + ((get, key),))

    def read(self):
        try:
            obj = self.root()
            for get, key in self.steps:
                obj = get(obj, key)
            return obj
        except _LOOKUP_ERRORS:
            return _MISSING


class CapturedState:
    """What ``fn`` reaches of Python state, read before it is traced: `guards` (checks that it still
    holds the same, each check's ``__doc__`` saying what), `tensor_guards` for the captured tensors a
    trace used, and a snapshot that `restore` puts back."""

    def __init__(self, fn, args=(), kwargs=None):
        self.guards = []
        self._seen = set()        # (code, owner id) collected
        self._guarded = set()     # ids of tensors a guard checks already
        self._named = {}          # id -> (name, tensor) of the tensors the code names (``c``, ``M.w``)
        # (path, object, whether its contents are guarded, whether it is the object the path leads to at
        # every call that the guards let through) whose attributes or items the function reads
        self._namespaces = []
        self._covered = {}  # id(tensor) -> id of the guarded table or container that holds it
        self._tables = []         # (text, table, copy) for dicts and lists, (text, cell, contents) for cells
        self._classes = set()     # ids of the user classes whose namespaces are in _tables (`_record_class`)
        self._tensor_paths = {}   # id(tensor) -> path, for the tensors reached through the namespaces
        self._contents = _Contents()
        self._local_attributes = set()  # attribute names the code reads from its local variables
        function, owner = _python_function(fn)
        if function is not None and not _is_library_code(function):
            wrapped = getattr(function, "__wrapped__", None)  # a decorator's wrapper passes its arguments on
            for f in ([wrapped] if isinstance(wrapped, types.FunctionType) else []) + [function]:
                self._collect(f, owner, arguments=_object_arguments(f, owner, args, kwargs or {}), compiled=True)
        elif _is_namespace(owner):  # a built-in module's forward: the tensors it reads are the module's
            self._namespaces.append((_Path("self", "self", lambda: owner), owner, False, True))
        self._explore()

    # Guards ---------------------------------------------------------------------------------------------

    def tensor_guards(self, tensors):
        """Identity checks of the captured tensors a graph reads that no guard checks yet (a module's
        parameters read by library code): replacing one (``model.fc.weight = Parameter(...)``) traces
        again. One check per root, reading the objects on the way once (a module's parameters share it).
        Then the check of the containers and module tables the function reaches (see `_explore`), last,
        so that a more specific check names what changed when both fail."""
        contents = self._contents.checks()
        by_root = {}
        for t in tensors:
            path = self._tensor_paths.get(id(t))
            if path is not None and id(t) not in self._guarded:
                self._guarded.add(id(t))
                if self._covered.get(id(t)) in self._contents.kept:
                    continue  # held by a table the contents check covers, reached through guarded objects
                by_root.setdefault(path.root, []).append((path, t))
        return [_same_tensors_check(group) for group in by_root.values()] + contents

    def geometry_guards(self, read):
        """A check of the geometry of the captured tensors the code names and of ``read``, the (name, tensor)
        pairs the graph reads (see `geometry_guard`); none without such tensors."""
        tensors = dict(self._named)
        for name, t in read:
            tensors.setdefault(id(t), (name, t))
        return [geometry_guard(list(tensors.values()))] if tensors else []

    def _collect(self, function, owner, owner_name="self", arguments=(), compiled=False):
        """Guard what ``function``'s code reads of Python state (``owner``: the object it is bound to,
        named ``owner_name``; ``arguments``: (name, object) of the objects it is called with; ``compiled``:
        whether it is the compiled function, whose owner and arguments the call's guard key fixes)."""
        code = function.__code__
        if (code, id(owner)) in self._seen:
            return
        self._seen.add((code, id(owner)))
        roots = {}
        for name, cell in zip(code.co_freevars, function.__closure__ or ()):
            roots["deref", name] = _Path(f"closure variable {name}", name, lambda cell=cell: _cell_contents(cell))
            self._tables.append((name, cell, _cell_contents(cell)))
        module_globals = function.__globals__
        self._tables.append(("", module_globals, dict(module_globals)))
        for name in sorted(_global_names(code)):
            if name in module_globals:
                roots["global", name] = _Path(f"global {name}", name,
                                              lambda name=name: module_globals.get(name, _MISSING))
        if owner is not None and code.co_argcount:
            self_name = code.co_varnames[0]
            roots["fast", self_name] = roots["deref", self_name] = _Path(owner_name, owner_name, lambda: owner)
        for name, value in arguments:
            roots["fast", name] = _Path(f"argument {name}", name, lambda value=value: value)
        for key, path in roots.items():
            value = path.read()
            if key[0] != "fast" and value is not owner:
                self._guard(path, value)
            self._record_class(path.name, value)
            if _is_namespace(value):
                # a global or closure variable is guarded by identity; the bound object and the arguments
                # of the compiled call are fixed by its guard key (a helper's are not)
                fixed = key[0] != "fast" or compiled
                self._namespaces.append((path, value, _is_container(value), fixed))
        for root, attrs in _attribute_chains(code):
            if root in roots:
                self._follow(roots[root], attrs)
            elif root[0] in ("fast", "local"):
                # read from an object the code reached through a container or a call (``for b in blocks:
                # b.alpha``): guarded on every object explored that holds such an attribute
                self._local_attributes.update(attrs)

    def _follow(self, path, attrs):
        """Guard each value along ``root.a.b...`` that is not a namespace read further."""
        obj = path.read()
        if isinstance(obj, types.ModuleType) and _is_library_module(obj):
            return
        for attr in attrs:
            if _is_user_class(obj):  # ``Config.scale``: a class attribute
                self._record_class(path.name, obj)
                value = _read_step(_class_member, obj, attr)
                if value is _MISSING or self._class_code(value, None, path):
                    return
                path = path.then(_class_member, attr, f".{attr}")
            elif not _is_namespace(obj):
                return
            else:
                value = _read_step(_attr, obj, attr)
                if value is _MISSING:
                    self._missing_attribute(path, obj, attr)
                    return
                path = path.then(_attr, attr, f".{attr}")
            if not _is_namespace(value):
                self._guard(path, value)
                return
            if _is_container(value):
                # its contents are guarded through this very object, so it must stay the one read here
                self.guards.append(_identity_check(path, value))
            self._namespaces.append((path, value, _is_container(value), _is_container(value)))
            obj = value

    def _record_class(self, name, value):
        """Record a user class's namespace (reached by name, ``S`` or ``M.S``) as a table: traced code that stores
        a tensor into a class attribute (``S.t = x + 1``) is then found, as a store into a global or an
        instance attribute is (a traced tensor was left there), and its store undone before the eager call."""
        if _is_user_class(value) and id(value) not in self._classes:
            self._classes.add(id(value))
            self._tables.append((name, _ClassTable(value), dict(vars(value))))

    def _missing_attribute(self, path, obj, attr):
        """``obj.attr`` is not in its instance dictionary: a method (whose code reads state of its own), a
        class attribute, or nothing yet (``getattr(self, "mask", None)``: setting it must trace again)."""
        value = _read_step(_class_member, type(obj), attr)
        if value is _MISSING:
            self._guard(path.then(_attr, attr, f".{attr}"), _MISSING)
        elif not self._class_code(value, obj, path):
            # a class attribute (``SCALE = 2.0``): re-read as lookup finds it, so that rebinding it on the
            # class, or setting it on the instance, traces again
            path = path.then(_resolved_attr, attr, f".{attr}")
            if _is_namespace(value):
                self.guards.append(_identity_check(path, value))
                self._namespaces.append((path, value, _is_container(value), _is_container(value)))
            else:
                self._guard(path, value)

    def _class_code(self, value, obj, path):
        """Whether a class attribute is code rather than data: a method or a property (whose user code
        is collected, bound to ``obj``), a static or class method, another descriptor."""
        if isinstance(value, property):
            value = value.fget
        elif not (isinstance(value, types.FunctionType) or hasattr(type(value), "__get__")):
            return False
        if isinstance(value, types.FunctionType) and not _is_library_code(value) and obj is not None:
            self._collect(value, obj, path.name)
        return True

    def _guard(self, path, value):
        if isinstance(value, types.ModuleType):
            return  # an imported module: what the function reads in it is guarded itself
        if value is _MISSING:
            check = _absent_check(path)
        elif type(value) in _SCALARS or _is_scalar_tuple(value):
            check = _value_check(path, value)
        else:
            check = _identity_check(path, value)
            if isinstance(value, Tensor):
                self._guarded.add(id(value))
                self._named[id(value)] = (path.name, value)
        self.guards.append(check)
        if isinstance(value, set):
            self._contents.add_set(value, path.name)
        if isinstance(value, types.FunctionType) and not _is_library_code(value):
            self._collect(value, None)  # a helper the function calls reads variables of its own

    # Snapshot ---------------------------------------------------------------------------------------------

    def _explore(self):
        """Visit what the namespaces hold (breadth first, instance dictionaries, lists, tuples and dicts):
        record each table's contents and a path to each tensor, and guard what the function may read
        that no chain of its code names.

        Code reads a container (``W[0]``, ``for w in W``, ``len(cfg)``) with no attribute load to follow,
        so a container it names is guarded whole, with what it holds, down through nested containers and
        the plain objects in them: its length and keys, each number and string by value, anything else
        by identity. A module (an object with parameter and module tables) is guarded on those tables,
        which library code iterates (``ModuleList``, ``Sequential``, ``parameters()``); a built-in module
        on its numbers too (``eps``, ``p``: its forward reads them), a user module's ``forward`` is
        collected as the function's own code is."""
        # what the guards fix first (so that an object is seldom visited again for being found fixed later)
        first_queue, queue = deque(), deque()

        def push(entry):
            (first_queue if entry[3] else queue).append(entry)
        for entry in self._namespaces:
            push(entry)
        visited = {}  # id -> (whether the object's contents are guarded, whether it is fixed), as yet
        explored = []
        done = len(self._namespaces)
        while (first_queue or queue) and len(visited) < _MAX_NODES:
            path, obj, whole, fixed = (first_queue or queue).popleft()
            first = id(obj) not in visited
            if not first:  # visited again only to guard or cover more (each flag turns on once)
                was_whole, was_fixed = visited[id(obj)]
                if was_whole >= whole and was_fixed >= fixed:
                    continue
                whole, fixed = whole or was_whole, fixed or was_fixed
            visited[id(obj)] = whole, fixed
            if first:
                explored.append((path.name, obj))
            if isinstance(obj, types.ModuleType):
                self._tables.append((path.name, vars(obj), dict(vars(obj))))
                continue  # only the attributes the code names (followed as chains)
            members = _members(obj)
            module = _module_tables(obj)
            for get, key, text, value in members:
                if isinstance(value, Tensor):
                    self._tensor_paths.setdefault(id(value), path.then(get, key, text))
                    if fixed and (module is None and whole or module is not None and get is _table_member):
                        self._covered.setdefault(id(value), _holder(obj, key))
            if first:
                if isinstance(obj, list):
                    self._tables.append((path.name, obj, list(obj)))
                elif not isinstance(obj, tuple):
                    self._tables += [(path.name, table, dict(table)) for table in _dicts_of(obj)]
                if module is not None:
                    self._guard_module(path, obj, module)
                    for entry in self._namespaces[done:]:  # what a user module's forward reads
                        push(entry)
                    done = len(self._namespaces)
            if module is None and whole:
                self._contents.add(obj, path.name)
            for get, key, text, value in members:
                if _is_namespace(value) and not isinstance(value, (Tensor, types.ModuleType)):
                    guarded = whole and module is None or module is not None and get is _table_member
                    push((path.then(get, key, text), value, whole and module is None, fixed and guarded))
                elif isinstance(value, set) and whole and module is None:
                    self._contents.add_set(value, f"{path.name}{text}")
        for name, obj in explored:
            d = _instance_dict(obj) if not isinstance(obj, (list, tuple, dict, types.ModuleType)) else None
            if type(d) is dict:
                self._contents.add_attributes(d, name, [k for k in self._local_attributes if k in d])

    def _guard_module(self, path, module, tables):
        """Guard a module's parameter, buffer and submodule tables; a built-in module's numbers and
        strings (its hyperparameters); collect a user module's ``forward``."""
        for name, table in tables:
            self._contents.add(table, (path.name, name), keys=False)  # (its entries read as attributes)
        forward = getattr(type(module), "forward", None)
        if isinstance(forward, types.FunctionType) and not _is_library_code(forward):
            self._collect(forward, module, path.name)
        else:
            d = _object_dict(module, "__dict__")
            # (``training`` is guarded where the module is called: see ``Module.__call__``)
            self._contents.add_attributes(d, path.name, [k for k, v in d.items() if type(k) is str and k != "training"
                                                         and (type(v) in _SCALARS or _is_scalar_tuple(v))])

    def stored_traced_values(self, is_traced):
        """Where traced code stored a value ``is_traced`` recognises (a traced tensor, or a container
        holding one) in the recorded state: readable names (``M.cache``, ``mask``)."""
        stored = []
        for text, table, before in self._tables:
            for key, value in _changed(table, before):
                if _holds(value, is_traced):
                    stored.append(_entry_text(text, key))
        return list(dict.fromkeys(stored))

    def restore(self):
        """Put back every recorded table as it was before the trace (the call then runs eagerly and
        makes its changes once)."""
        for _, table, before in self._tables:
            if isinstance(table, types.CellType):
                if _cell_contents(table) is not before:
                    if before is _MISSING:
                        del table.cell_contents
                    else:
                        table.cell_contents = before
            elif isinstance(table, list):
                if len(table) != len(before) or any(a is not b for a, b in zip(table, before)):
                    table[:] = before
            else:
                for key in [k for k in table if k not in before]:
                    del table[key]
                for key, value in before.items():
                    if table.get(key, _MISSING) is not value:
                        table[key] = value


class _ClassTable:
    """A class's namespace as `CapturedState` records a table: read through its mapping proxy, written with
    setattr and delattr (a proxy takes no assignment)."""

    __slots__ = ("cls",)

    def __init__(self, cls):
        self.cls = cls

    def items(self):
        return vars(self.cls).items()

    def get(self, key, default=None):
        return vars(self.cls).get(key, default)

    def __iter__(self):
        return iter(list(vars(self.cls)))

    def __setitem__(self, key, value):
        setattr(self.cls, key, value)

    def __delitem__(self, key):
        delattr(self.cls, key)


class _Contents:
    """One check of the containers, instance dictionaries and module tables a trace may have read: that
    each still holds what it held (same length, keys in the same order, numbers and strings equal, other
    values the same objects). Each object is the one the trace saw: the guards of the objects holding it
    (or, for the outermost, the guard of the chain that names it) check that. The common case, nothing
    changed, is a few C-level passes over all of them together; when one changed, the check's
    ``__doc__`` names it.

    A container the traced code itself changes (``calls.append(...)``, ``stats["n"] += 1``) is the
    function's output rather than its input: a graph does not repeat Python effects (they happen when it
    traces), so such a container is not guarded (else each call would trace again)."""

    def __init__(self):
        self._ids = set()
        self._objects = []  # lists and dicts, with whether a dict's keys are checked: (object, keys)
        self._scalar_dicts, self._scalar_names = [], []  # (instance dict, attribute name) pairs
        self._sets = []  # (set, frozen copy)
        self._names = {}  # id -> how the function reaches the object (``W``, ``self.ml._modules``)
        self._before = {}  # id -> what the object held before the trace
        self.kept = set()  # ids of the objects `checks` checks (those the trace left as they were)

    def add(self, obj, name, keys=True):
        """Guard a list's or dict's items (a dict's keys too unless ``keys`` is false: a module table's
        keys only name its values), or an object's instance dictionary. A tuple needs no check of its
        own: it cannot change, and what holds it is checked to be the same object."""
        if not isinstance(obj, (list, dict)):
            obj = _instance_dict(obj)
            if type(obj) is not dict:
                return
        if id(obj) in self._ids:
            return
        self._ids.add(id(obj))
        self._objects.append((obj, keys))
        self._names[id(obj)] = name
        self._before[id(obj)] = _held(obj)

    def add_attributes(self, d, name, keys):
        """Guard the entries ``keys`` of ``name``'s instance dictionary ``d``."""
        for key in keys:
            if (id(d), key) not in self._ids:
                self._ids.add((id(d), key))
                self._scalar_dicts.append(d)
                self._scalar_names.append(key)
        self._names[id(d)] = name

    def add_set(self, value, name):
        """Guard a set's elements (``if key in ALLOWED``)."""
        if id(value) not in self._ids:
            self._ids.add(id(value))
            self._sets.append((value, frozenset(value)))
            self._names[id(value)] = name

    def checks(self):
        """[the check], or [] when there is nothing to check; made after the trace."""
        kept = [(obj, keys) for obj, keys in self._objects if _same_items(_held(obj), self._before[id(obj)])]
        self.kept = {id(obj) for obj, _ in kept}
        sets = tuple(s for s, before in self._sets if s == before)  # (else the traced code changed it)
        frozen = tuple(map(frozenset, sets))
        if not (kept or self._scalar_dicts or sets):
            return []
        objects = [obj for obj, _ in kept]
        # live views: the check iterates them all in one pass, without making a view per dict per call
        parts = []
        for obj, keys in kept:
            if not isinstance(obj, dict):
                parts.append(obj)
            else:
                parts += [obj.keys(), obj.values()] if keys else [obj.values()]
        parts = tuple(parts)
        scalar_dicts, scalar_names = tuple(self._scalar_dicts), tuple(self._scalar_names)
        lengths = tuple(map(len, parts))
        filled = tuple(part for part in parts if len(part))  # (the lengths check the empty ones)
        held = tuple(chain(chain.from_iterable(filled), map(dict.get, scalar_dicts, scalar_names)))
        before = self._before
        scalars_before = [(d, name, d.get(name)) for d, name in zip(scalar_dicts, scalar_names)]
        names = self._names

        def check():
            if tuple(map(len, parts)) == lengths and all(
                    map(is_, chain(chain.from_iterable(filled), map(dict.get, scalar_dicts, scalar_names)), held)
            ) and (not sets or all(map(eq, sets, frozen))):
                return True
            # another object may still be the same: an equal number or string (``s = float("1.5")``)
            for obj in objects:
                if not _same_items(_held(obj), before[id(obj)]):
                    check.__doc__ = _difference(obj, before[id(obj)], names[id(obj)])
                    return False
            for d, name, value in scalars_before:
                if not _same_items((d.get(name, _MISSING),), (value,)):
                    check.__doc__ = (f"{names[id(d)]}.{name} == {value!r}" if type(value) in _SCALARS
                                     else f"{names[id(d)]}.{name} is the same {type(value).__name__}")
                    return False
            for value, then in zip(sets, frozen):
                if value != then:
                    check.__doc__ = f"{names[id(value)]} holds what it held"
                    return False
            return True
        check.__doc__ = f"the {len(objects)} containers and module tables the function reaches hold what they held"
        return [check]


def _difference(obj, before, name):
    """What a failed contents check says: the first entry of ``obj`` (reached as ``name``; (the module's
    name, the table's) for a module table, whose entries read as attributes) that no longer holds what it
    held (``before``)."""
    if isinstance(obj, list):
        if len(obj) != len(before):
            return f"len({name}) == {len(before)}"
        entries = [(f"{name}[{i}]", a, b) for i, (a, b) in enumerate(zip(obj, before))]
    else:
        keys = before[:len(before) // 2]
        if not _same_items(list(obj), keys):
            shown = f"{'.'.join(name)} has the entries" if isinstance(name, tuple) else f"{name} has the keys"
            return f"{shown} {', '.join(map(repr, keys)) or '(none)'}"
        entries = [(f"{name[0]}.{key}" if isinstance(name, tuple) else f"{name}[{key!r}]", obj[key], b)
                   for key, b in zip(keys, before[len(before) // 2:])]
    for where, now, then in entries:
        if not _same_items((now,), (then,)):
            return f"{where} == {then!r}" if type(then) in _SCALARS else f"{where} is the same {type(then).__name__}"
    return f"{name} holds what it held"


def _held(obj):
    """A list's items, a dict's keys and values, in order."""
    return list(obj) if isinstance(obj, list) else [*obj, *obj.values()]


def _same_items(now, then):
    now, then = list(now), list(then)
    return len(now) == len(then) and all(
        a is b or (type(a) is type(b) and (type(b) in _SCALARS or _is_scalar_tuple(b)) and a == b)
        for a, b in zip(now, then))


def _is_container(value):
    return isinstance(value, (list, tuple, dict))


def _holder(obj, key):
    """The id of the table or container whose check covers ``obj``'s member ``key`` (a module's
    parameter and buffer tables, a container itself, an object's instance dictionary)."""
    if isinstance(obj, (list, tuple, dict)):
        return id(obj)
    d = _object_dict(obj, "__dict__")
    return id(d[key[0]]) if type(key) is tuple else id(d)


def _module_tables(obj):
    """A module's (an object with ``_parameters`` and ``_modules`` dicts) parameter, buffer and submodule
    tables; None for other objects."""
    d = _instance_dict(obj)
    if type(d) is not dict or type(d.get("_parameters")) is not dict or type(d.get("_modules")) is not dict:
        return None
    return [(table, d[table]) for table in _MODULE_TABLES if type(d.get(table)) is dict]


def _object_arguments(function, owner, args, kwargs):
    """(parameter name, object) for the arguments of a call of ``function`` that are objects it may read
    state through (not tensors, numbers or containers: the call's guard key holds those). The call's
    guard key fixes each such object, so a graph may read it as it is now."""
    code = function.__code__
    names = code.co_varnames[1 if owner is not None else 0:code.co_argcount + code.co_kwonlyargcount]
    pairs = list(zip(names, args)) + [(name, kwargs[name]) for name in names if name in kwargs]
    return [(name, value) for name, value in pairs
            if _is_namespace(value) and not _is_container(value) and not isinstance(value, types.ModuleType)
            # the key compares hashable objects with ``==``: only identity's ``==`` fixes the object
            and (type(value).__eq__ is object.__eq__ or type(value).__hash__ is None)]


def _python_function(fn):
    """(the Python function whose code runs when ``fn`` is called, the object it is bound to or None):
    a bound method's, a wrapped function's, a module's ``forward``, a callable object's ``__call__``;
    (None, None) for builtins."""
    owner = None
    while True:
        if isinstance(fn, types.FunctionType):
            return fn, owner
        if isinstance(fn, types.MethodType):
            fn, owner = fn.__func__, fn.__self__
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        elif callable(getattr(type(fn), "forward", None)):
            fn, owner = type(fn).forward, fn
        elif isinstance(getattr(type(fn), "__call__", None), types.FunctionType):
            fn, owner = type(fn).__call__, fn
        else:
            return None, None


@functools.lru_cache(maxsize=4096)  # (a model's blocks share their forward's code: read once)
def _attribute_chains(code):
    """(root, attribute names) for each chain of attribute loads in ``code`` and the code nested in it:
    root is ("global" | "deref" | "fast", name), or ("local", name) for nested code's own locals (a
    comprehension's ``b`` in ``[b.w for b in blocks]``), which are no roots."""
    chains = []
    for nested in [code] + _nested_code(code):
        root, attrs = None, ()
        for opname, argval in _instructions(nested):
            if root is not None and opname in _CHAIN_OPS:
                attrs += (argval,)
                continue
            if root is not None and attrs:
                chains.append((root, attrs))
            kind = _ROOT_OPS.get(opname)
            if kind == "fast" and nested is not code:
                kind = "local"
            root = (kind, argval) if kind else None
            attrs = ()
    return tuple(dict.fromkeys(chains))


@functools.lru_cache(maxsize=4096)
def _instructions(code):
    """(opname, argval) of each instruction of ``code``: read once for `_attribute_chains` and
    `_global_names` (disassembling is a tenth of reading a GPT step's captured state)."""
    return tuple((ins.opname, ins.argval) for ins in dis.get_instructions(code))


def _nested_code(code):
    nested = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            nested += [const] + _nested_code(const)
    return nested


@functools.lru_cache(maxsize=4096)
def _global_names(code):
    """The names ``code`` and the code nested in it (lambdas, comprehensions) read as globals."""
    return frozenset(argval for c in [code] + _nested_code(code) for opname, argval in _instructions(c)
                     if opname == "LOAD_GLOBAL")


def _instance_dict(obj):
    try:
        return _object_dict(obj, "__dict__")
    except (AttributeError, TypeError):
        return None


def _attr(obj, name):
    """``obj.name`` as its instance dictionary (or a module's parameter, buffer and submodule tables)
    holds it, without running any code of ``obj``'s."""
    d = _object_dict(obj, "__dict__")
    if name in d:
        return d[name]
    for table in _MODULE_TABLES:
        members = d.get(table)
        if type(members) is dict and name in members:
            return members[name]
    raise KeyError(name)


def _class_member(cls, name):
    """``cls.name`` as the class dictionaries along its MRO hold it (no descriptor or metaclass code)."""
    for klass in cls.__mro__:
        d = vars(klass)
        if name in d:
            return d[name]
    raise KeyError(name)


def _resolved_attr(obj, name):
    """``obj.name`` as lookup finds a data attribute: in the instance (see `_attr`), else on its class."""
    try:
        return _attr(obj, name)
    except _LOOKUP_ERRORS:
        return _class_member(type(obj), name)


def _is_user_class(value):
    """A class of the user's (not jitorch's, nor the standard library's or a built-in one)."""
    if not isinstance(value, type):
        return False
    top = (getattr(value, "__module__", None) or "").partition(".")[0]
    return top not in ("jitorch", "builtins") and top not in getattr(sys, "stdlib_module_names", ())


def _dict_attr(obj, name):
    return _object_dict(obj, "__dict__")[name]


def _table_member(obj, key):
    table, name = key
    return _object_dict(obj, "__dict__")[table][name]


def _item(obj, key):
    if type(obj) not in (list, tuple, dict):
        raise TypeError("not a container")  # (a container type's own __getitem__ runs no user code)
    return obj[key]


def _read_step(get, obj, key):
    try:
        return get(obj, key)
    except _LOOKUP_ERRORS:
        return _MISSING


def _members(obj):
    """(getter, key, path text, value) for what a namespace holds: its items, or its instance attributes
    (a module's parameters, buffers and submodules as attributes)."""
    if isinstance(obj, (list, tuple)):
        return [(_item, i, f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return [(_item, k, f"[{k!r}]", v) for k, v in list(obj.items()) if type(k) in (str, int)]
    d = _instance_dict(obj)
    if type(d) is not dict:
        return []
    members = [(_dict_attr, k, f".{k}", v) for k, v in list(d.items())
               if type(k) is str and not (k in _MODULE_TABLES and type(v) is dict)]
    for table in _MODULE_TABLES:
        if type(d.get(table)) is dict:
            members += [(_table_member, (table, k), f".{k}", v) for k, v in list(d[table].items())]
    return members


def _dicts_of(obj):
    """An object's instance dictionary and a module's parameter, buffer and submodule tables."""
    d = _instance_dict(obj)
    if type(d) is not dict:
        return []
    return [d] + [d[table] for table in _MODULE_TABLES if type(d.get(table)) is dict]


def _is_namespace(value):
    """Whether the function may read state through ``value``: a Python module, a list, tuple or dict, or
    an object with an instance dictionary (not a tensor, class, function or jitorch machinery)."""
    if isinstance(value, (types.ModuleType, list, dict)):
        return True
    if isinstance(value, tuple):
        return not _is_scalar_tuple(value)
    if isinstance(value, (Tensor, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    return type(_instance_dict(value)) is dict and not type(value).__module__.startswith(_INTERNAL)


def _is_scalar_tuple(value):
    return type(value) is tuple and all(type(v) in _SCALARS for v in value)


def _is_library_code(function):
    """jitorch's own functions (a built-in module's ``forward``, ``F.relu``) read no user state."""
    return (function.__module__ or "").partition(".")[0] == "jitorch"


def _is_library_module(module):
    """jitorch itself and the standard library: their attributes are no state a user rebinds."""
    top = (module.__name__ or "").partition(".")[0]
    return top == "jitorch" or top in getattr(sys, "stdlib_module_names", ())


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a variable deleted, or not yet assigned)
        return _MISSING


def _value_check(path, value):
    read = path.read

    def check():
        now = read()
        return now is value or (type(now) is type(value) and now == value)
    check.__doc__ = f"{path.text} == {value!r}"
    return check


def _identity_check(path, value):
    read = path.read

    def check():
        return read() is value
    check.__doc__ = f"{path.text} is the same {type(value).__name__}"
    return check


def _same_tensors_check(group):
    """Whether the (path, tensor) pairs of ``group``, paths from one root, still lead to those tensors."""
    tree = {}
    for path, t in group:
        node = tree
        for step in path.steps[:-1]:
            node = node.setdefault(step, {})
        node[path.steps[-1]] = t
    nodes = _frozen(tree)
    root = group[0][0].root

    def check():
        try:
            return _same_tensors(root(), nodes)
        except _LOOKUP_ERRORS:
            return False
    shown = ", ".join(path.name for path, _ in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
    check.__doc__ = f"the captured tensors {shown} are the same tensors"
    return check


def _frozen(tree):
    """A tree of steps as (getter, key, the tensor at a leaf, the children of an inner node) tuples."""
    return tuple((get, key, None, _frozen(sub)) if isinstance(sub, dict) else (get, key, sub, None)
                 for (get, key), sub in tree.items())


def _same_tensors(obj, nodes):
    for get, key, expected, children in nodes:
        value = get(obj, key)
        if children is None:
            if value is not expected:
                return False
        elif not _same_tensors(value, children):
            return False
    return True


def geometry_guard(named):
    """A check that the tensors of ``named`` ((name, tensor) pairs) still have the shapes, strides, offsets,
    dtypes, devices and memory sizes they have now, and share memory as they do now: a trace bakes those in
    (a kernel's index maths, Python reading ``c.shape``, which captured tensors alias), so a tensor reshaped
    or given other memory outside the function (``c.t_()``, ``c.data = ...``) must trace again. New memory of
    the same size and layout (``p.data = p.data - lr * g``) needs none. The tensors are read again only when
    some tensor's geometry changed since the check last held (`tensor.GEOMETRY_EPOCH`)."""
    tensors = [t for _, t in named]
    traced = _geometry(tensors)
    verified = [GEOMETRY_EPOCH[0]]

    def check():
        epoch = GEOMETRY_EPOCH[0]
        if epoch == verified[0]:
            return True
        if _geometry(tensors) != traced:
            return False
        verified[0] = epoch
        return True
    shown = ", ".join(name for name, _ in named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
    check.__doc__ = f"the captured tensors {shown} have the geometry and memory they were traced with"
    return check


def _geometry(tensors):
    first = {}  # storage -> the index of the first tensor over it
    return [(t._shape, t._stride, t._offset, t.dtype, t.device, t._storage.size, first.setdefault(id(t._storage), i))
            for i, t in enumerate(tensors)]


def _absent_check(path):
    read = path.read

    def check():
        return read() is _MISSING
    check.__doc__ = f"{path.text} is not set"
    return check


def _changed(table, before):
    """(key, new value) of the entries of a recorded table that differ from ``before``."""
    if isinstance(table, types.CellType):
        now = _cell_contents(table)
        return [] if now is before else [(None, now)]
    if isinstance(table, list):
        if len(table) == len(before) and all(a is b for a, b in zip(table, before)):
            return []
        return [(i, v) for i, v in enumerate(table) if i >= len(before) or v is not before[i]]
    return [(k, v) for k, v in list(table.items()) if before.get(k, _MISSING) is not v]


def _holds(value, is_traced, depth=4):
    """Whether ``value`` is, or (a few levels down its containers and attributes) holds, a traced value."""
    if is_traced(value):
        return True
    if depth == 0 or isinstance(value, (Tensor, types.ModuleType, type)) or not _is_namespace(value):
        return False
    return any(_holds(v, is_traced, depth - 1) for _, _, _, v in _members(value))


def _entry_text(table_text, key):
    if key is None:
        return table_text
    if isinstance(key, int):
        return f"{table_text}[{key}]"
    return f"{table_text}.{key}" if table_text else key
