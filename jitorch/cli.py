"""The ``jitorch`` command: ``jitorch demo``, ``jitorch inspect FILE`` and
``jitorch run FILE --input x=a.npy --output out.npy``.

Subcommands register in `SUBCOMMANDS` (name -> (help, add_arguments, run)).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _load_arguments(p):
    p.add_argument("--trust-object-code", action="store_true",
                   help="run the file's compiled kernels (object code, PTX) where they match this machine, "
                        "after checking their form; only for files you would run as programs. Without it, "
                        "kernels are compiled again from the file's graph")
    p.add_argument("--max-bytes", type=int, default=None, metavar="N",
                   help="let the file's members declare up to N bytes in all (default: in proportion to the "
                        "file's size)")


def _load(args):
    from .export import load
    return load(args.file, trust_object_code=args.trust_object_code, max_bytes=args.max_bytes)


def _inspect_arguments(p):
    p.add_argument("file", help="an exported program (jitorch.export(...).save(FILE))")
    _load_arguments(p)


def _inspect(args, out):
    program = _load(args)
    print(f"file: {args.file}", file=out)
    print("signature:", file=out)
    for line in program.signature.describe():
        print("  " + line, file=out)
    print(f"constants: {len(program.constants)}", file=out)
    for name, t in program.constants.items():
        print(f"  {name}: {list(t.shape)} {t.dtype} {t.device}", file=out)
    print("graph:", file=out)
    print(program.graph, file=out)
    print("artifacts:", file=out)
    for note in program.artifact_notes or ["none (kernels are compiled from the graph when loaded)"]:
        print("  " + note, file=out)
    return 0


def _run_arguments(p):
    p.add_argument("file", help="an exported program")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input tensor by its name in the signature (repeat for each input)")
    p.add_argument("--output", action="append", default=[], metavar="FILE.npy",
                   help="where to write each tensor output, in the signature's order (repeat)")
    _load_arguments(p)


def _run(args, out):
    from .ops.creation import from_numpy
    from .runtime.pytree import tree_flatten, tree_unflatten
    program = _load(args)
    given = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"--input takes NAME=FILE.npy, got {item!r}")
        given[name] = from_numpy(np.load(path, allow_pickle=False))
    sig = program.signature
    wanted = [leaf.name for leaf in sig.tensor_inputs()]
    if set(given) != set(wanted):
        raise ValueError(f"the program takes inputs {wanted}; --input gave {sorted(given)}")
    # .npy files hold host arrays: each goes to the device its input lives on
    leaves = [given[leaf.name].to(leaf.device) if leaf.kind == "tensor" else leaf.value
              for leaf in sig.inputs.leaves]
    call_args, call_kwargs = tree_unflatten(leaves, sig.inputs.tree)
    result = program(*call_args, **call_kwargs)
    tensors = [leaf for leaf in tree_flatten(result)[0] if hasattr(leaf, "numpy")]
    if len(args.output) != len(tensors):
        raise ValueError(f"the program returns {len(tensors)} tensors; give one --output per tensor "
                         f"(got {len(args.output)})")
    for path, t in zip(args.output, tensors):
        np.save(path, t.detach().cpu().numpy(), allow_pickle=False)
        print(f"wrote {path}: {list(t.shape)} {t.dtype}", file=out)
    return 0


def _demo_arguments(p):
    p.add_argument("options", nargs="*", help="the demo's own options: jitorch demo --help lists them")


def _demo(argv, out):
    from .demo import main as demo_main
    return demo_main(argv)


SUBCOMMANDS = {
    "demo": ("train a digit classifier eagerly and compiled, export it and reload it", _demo_arguments, _demo),
    "inspect": ("print an exported program's signature, graph and artifacts", _inspect_arguments, _inspect),
    "run": ("run an exported program on .npy inputs", _run_arguments, _run),
}


def parser():
    """The argument parser, one subparser per entry of `SUBCOMMANDS`."""
    p = argparse.ArgumentParser(prog="jitorch", description="jitorch command line tools")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (help, add_arguments, _) in SUBCOMMANDS.items():
        add_arguments(sub.add_parser(name, help=help, description=help))
    return p


def main(argv=None, out=None):
    """Entry point of the ``jitorch`` console script; returns the exit status."""
    out = out or sys.stdout
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["demo"]:  # the demo parses its own options
        return _demo(argv[1:], out)
    args = parser().parse_args(argv)
    from .export import ExportError
    try:
        return SUBCOMMANDS[args.command][2](args, out)
    except (ExportError, OSError, TypeError, ValueError, RuntimeError, MemoryError) as e:  # RuntimeError: no CUDA
        print(f"jitorch {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e):
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 2000 else text[:2000] + " ..."


if __name__ == "__main__":
    sys.exit(main())
