"""`texpr-ad` (also `python -m texpr_ad`): coverage report, operator inspection, your own op.

    texpr-ad coverage [--ops GLOB] [--targets cpu,torch,tvm,cuda] [--format table|md|json|html]
                      [-o PATH] [--jobs N]
    texpr-ad coverage --relax [--ops GLOB] [--format table|md|json] [-o PATH]
    texpr-ad show OP
    texpr-ad grad FILE.py:FUNC [--shapes NAME=4x5 ...] [--seed S]

Exit codes: 0 fine, 1 a gating check failed (a forward, a derivation or a gradient
check of an operator that should work), 2 a usage error.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import TexprError

DEFAULT_TARGETS = "cpu,torch,tvm,cuda"


def _cuda_mode(targets: str) -> None:
    """Without a GPU, run the cuda column on Numba's CUDA simulator (cells then say "simulator").

    The flag must be set before numba is first imported, so it is decided here, from the
    device files, not by asking numba.cuda.
    """
    import glob
    import os
    import sys
    wants = targets == "all" or "cuda" in targets.split(",")
    if wants and "numba" not in sys.modules and not glob.glob("/dev/nvidia[0-9]*"):
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="texpr-ad", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("coverage", help="the per-operator coverage matrix")
    c.add_argument("--ops", default="*", help="comma-separated globs over operator names")
    c.add_argument("--targets", default=DEFAULT_TARGETS,
                   help=f"columns to include (default {DEFAULT_TARGETS}; 'all')")
    c.add_argument("--format", choices=["table", "md", "json", "html"], default="table")
    c.add_argument("-o", "--output", metavar="PATH",
                   help="write PATH.md/.json/.html (all three with --format table, "
                        "else the chosen one)")
    c.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    c.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    c.add_argument("--relax", action="store_true",
                   help="the Relax matrix instead: every Relax tensor op of the installed TVM "
                        "through relax.transform.Gradient (needs apache-tvm; writes PATH.relax.*)")

    s = sub.add_parser("show", help="an operator's forward, adjoints, plan and kernel source")
    s.add_argument("op")
    s.add_argument("--dtype", default="float64", choices=["float32", "float64"])

    g = sub.add_parser("grad", help="derive and check the gradient of your own operator")
    g.add_argument("target", metavar="FILE.py:FUNC",
                   help="FUNC() returns (outputs, inputs): te tensors and their placeholders")
    g.add_argument("--shapes", nargs="*", default=[], metavar="NAME=4x5",
                   help="concrete shapes for placeholders with symbolic dims")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-source", action="store_true", help="do not print the kernels' source")

    args = p.parse_args(argv)
    if args.cmd == "coverage":
        _cuda_mode(args.targets)
    try:
        return _dispatch(args)
    except TexprError as e:  # a UsageError, or a mistake in the user's definition
        print(f"texpr-ad {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `texpr-ad show conv2d | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    match args.cmd:
        case "coverage":
            return cmd_relax(args) if args.relax else cmd_coverage(args)
        case "show":
            return cmd_show(args)
        case "grad":
            return cmd_grad(args)
    return 2


class UsageError(TexprError, ValueError):
    """A mistake in the command line (reported without a traceback, exit code 2)."""


# -- coverage ----------------------------------------------------------------------------------

def cmd_coverage(args: argparse.Namespace) -> int:
    from ..ops.registry import select
    from .coverage import previous_seconds, run_coverage
    from .render import RENDERERS, render_table
    from .term import Progress

    columns = _check_coverage_args(args)
    _check_globs(args.ops, [e.name for e in select("*")], "operator")
    entries = select(args.ops)
    base = _output_base(args, {".md", ".json", ".html"})
    formats = list(RENDERERS) if args.format == "table" else [args.format]
    paths = [base.with_name(base.name + RENDERERS[f][0]) for f in formats] if args.output else []
    _check_writable(paths)  # before the run, not after minutes of it
    hint = previous_seconds(base.with_name(base.name + ".json")) if args.output else {}
    with Progress(enabled=not args.no_progress) as progress:
        report = run_coverage(entries, columns, jobs=args.jobs, progress=progress, cost_hint=hint)

    if args.output:
        for f, path in zip(formats, paths, strict=True):
            try:
                path.write_text(RENDERERS[f][1](report), encoding="utf-8")
            except OSError as e:
                raise UsageError(f"-o {args.output}: cannot write {path} ({e.strerror or e})") \
                    from None
            print(f"wrote {path}", file=sys.stderr)
    if args.format == "table":
        color = {"always": True, "never": False}.get(args.color,
                                                     sys.stdout.isatty() and not os.environ.get(
                                                         "NO_COLOR"))
        print(render_table(report, color=color))
    elif not args.output:
        print(RENDERERS[args.format][1](report), end="")
    else:
        print(report.kernels_line())
        print(report.summary_line())
    return 1 if report.failures else 0


def _check_coverage_args(args: argparse.Namespace) -> list[Any]:
    """The options `coverage` and `coverage --relax` share, checked alike (UsageError);
    returns the --targets columns."""
    from .columns import select_columns
    if not any(g.strip() for g in args.ops.split(",")):
        raise UsageError(f"--ops {args.ops!r} names no operator; give globs like 'conv*,relu'")
    try:
        columns = select_columns(args.targets)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not columns:
        raise UsageError(f"--targets {args.targets!r} names no target; give e.g. 'cpu,tvm' or "
                         "'all'")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    if args.output is not None and not args.output.strip():
        raise UsageError("-o needs a path (got an empty one)")
    return columns


def _check_globs(globs: str, names: list[str], what: str, prefix: str = "") -> None:
    """A UsageError naming the first --ops glob that matches none of `names` (and close ones):
    a typo beside a glob that matches must not drop that operator from the report silently."""
    import difflib
    import fnmatch
    for g in (g.strip() for g in globs.split(",") if g.strip()):
        if not any(fnmatch.fnmatchcase(n, g) or fnmatch.fnmatchcase(n, prefix + g) for n in names):
            close = difflib.get_close_matches(g, names, 3)
            raise UsageError(f"--ops {g!r} matches no {what}"
                             + (f"; did you mean {', '.join(close)}?" if close else ""))


def _output_base(args: argparse.Namespace, suffixes: set[str]) -> Path:
    """-o PATH without a report suffix (`out.md` and `out` name the same reports); a folder
    (one that exists, or `out/`) gets `coverage.*` inside, not `out.md` beside it."""
    if args.output and (args.output.endswith(("/", os.sep)) or Path(args.output).is_dir()):
        return Path(args.output) / "coverage"
    base = Path(args.output or "")
    return base.with_suffix("") if base.suffix in suffixes else base


def _check_writable(paths: Sequence[Path]) -> None:
    """Raise a UsageError unless every path in `paths` can be created or overwritten."""
    import tempfile
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                raise IsADirectoryError(21, "is a folder")
            tempfile.TemporaryFile(dir=path.parent).close()
        except OSError as e:
            why = f"{e.strerror}: {e.filename}" if e.filename else (e.strerror or str(e))
            raise UsageError(f"-o: cannot write {path} ({why}); choose a writable path") from None


def cmd_relax(args: argparse.Namespace) -> int:
    """`coverage --relax`: the Relax matrix (report/relax_matrix.py)."""
    _check_coverage_args(args)
    if args.format == "html":
        raise UsageError("--relax writes md and json (--format table, md or json)")
    from ..relax_bridge.tvm_expr import tvm_import_error
    why = tvm_import_error()
    if why:
        raise UsageError(f"--relax: {why}")
    from .relax_matrix import RELAX_RENDERERS, render_relax_json, render_relax_markdown, \
        render_relax_table, run_relax_matrix, select_ops, summary_lines, write_relax_report
    base = _output_base(args, {".md", ".json"})
    formats = ["md", "json"] if args.format == "table" else [args.format]
    if args.output:
        _check_writable([base.with_name(base.name + RELAX_RENDERERS[f][0]) for f in formats])
    _check_globs(args.ops, select_ops("*"), "Relax tensor op (e.g. 'relax.nn.*')", "relax.")
    ops = select_ops(args.ops)
    from .term import Progress
    with Progress(enabled=not args.no_progress, what="relax") as progress:
        rep = run_relax_matrix(ops, progress=progress)
    if args.output:
        try:
            written = write_relax_report(rep, base, formats)
        except OSError as e:
            raise UsageError(f"-o {args.output}: cannot write ({e.strerror or e}: "
                             f"{e.filename})") from None
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
    if args.format == "table":
        print(render_relax_table(rep))
    elif not args.output:
        print((render_relax_markdown if args.format == "md" else render_relax_json)(rep), end="")
    else:
        print("\n".join(summary_lines(rep)))
    return 1 if rep.failures else 0


# -- show --------------------------------------------------------------------------------------

def _banner(title: str) -> str:
    return f"\n=== {title} " + "=" * max(0, 72 - len(title))


def cmd_show(args: argparse.Namespace) -> int:
    from ..ops.registry import get
    try:
        entry = get(args.op)
    except KeyError as e:
        raise UsageError(str(e).strip("'\"")) from None
    print(f"{entry.name}  [{entry.category}]  {entry.notes}")
    if not entry.has_compute:
        print(f"no compute form: {entry.no_compute}")
        return 0
    s = entry.sample(args.dtype)  # type: ignore[misc]
    diff = [x for x, d in zip(s.inputs, s.differentiable, strict=True) if d]
    from ..te.tensor import shape_str
    print("inputs: " + ", ".join(
        f"{x.name}{shape_str(x.shape)}:{x.dtype}"
        f"{'' if any(x is y for y in diff) else ' (not differentiable)'}" for x in s.inputs))
    return _describe(list(s.outputs), list(s.inputs), diff, show_source=True)


def _describe(outputs: list[Any], inputs: list[Any], wrt: list[Any], show_source: bool) -> int:
    """Print the forward, the adjoints, then the plans and sources of both kernels; returns 0."""
    from .. import te
    from ..deriv import grad
    from ..kernels import build
    from ..te import dtype as dt

    print(_banner("forward"))
    for o in outputs:
        print(str(o))
    outs = [o for o in outputs if dt.is_float(o.dtype)]
    kernels = [("forward", build(outputs, inputs, target="cpu"))]
    print(_banner("adjoints"))
    if not wrt or not outs:
        print("not differentiable: " + ("no float input" if not wrt else "no float output"))
    else:
        heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in outs]
        grads = grad(outs, wrt, head=heads)
        for x, gx in zip(wrt, grads, strict=True):
            print(f"# d{x.name}")
            print("zero (no dependence)" if gx is None else str(gx))
        live = [gx for gx in grads if gx is not None]
        if live:
            kernels.append(("adjoint", build(live, inputs + heads, target="cpu")))
    for what, k in kernels:
        print(_banner(f"{what} plan"))
        print(k.plan)
    if show_source:
        for what, k in kernels:
            print(_banner(f"{what} kernel source"))
            print(k.source)
    return 0


# -- grad --------------------------------------------------------------------------------------

def load_user_op(spec: str) -> Any:
    """The function FUNC of FILE.py in 'FILE.py:FUNC'."""
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise UsageError(f"expected FILE.py:FUNC, got {spec!r}")
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no file {path!r}")
    mod_spec = importlib.util.spec_from_file_location(f"texpr_user_{file.stem}", file)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    _run_user(file, f"importing {path}", mod_spec.loader.exec_module, mod)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise UsageError(f"{path} has no function {func!r}")
    return fn


def _run_user(file: Path, what: str, fn: Any, *args: Any) -> Any:
    """`fn(*args)` (user code), with any exception it raises made a UsageError that says where
    in `file` it came from (no traceback: exit code 2)."""
    try:
        return fn(*args)
    except SyntaxError as e:
        raise UsageError(f"{what}: syntax error in {e.filename} line {e.lineno}: {e.msg}") \
            from None
    except TexprError as e:
        raise UsageError(f"{what}: {e}") from None
    except (Exception, SystemExit) as e:
        import traceback
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if Path(f.filename).resolve() == file.resolve()]
        where = f" ({file.name} line {frames[-1].lineno})" if frames else ""
        raise UsageError(f"{what} raised {type(e).__name__}: {e}{where}") from None


def _parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for it in items:
        name, sep, dims = it.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
            if any(d < 0 for d in out[name]):
                raise ValueError
        except ValueError:
            raise UsageError(f"--shapes expects NAME=4x5 (or NAME= for a scalar), got {it!r}") \
                from None
    return out


def _random_array(x: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    from ..te import dtype as dt
    if dt.is_float(x.dtype):
        return rng.standard_normal(shape).astype(x.dtype)
    if x.dtype == "bool":
        return rng.random(shape) < 0.5
    return np.zeros(shape, dtype=x.dtype)  # integer inputs (indices): 0 is always in range


def _concrete_shape(x: Any, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    from ..te.expr import Const
    if x.name in shapes:
        if len(shapes[x.name]) != x.ndim:
            raise UsageError(f"--shapes {x.name}= gives {len(shapes[x.name])} dims; "
                             f"{x.name!r} has {x.ndim}")
        return shapes[x.name]
    if all(isinstance(d, Const) for d in x.shape):
        return tuple(int(d.value) for d in x.shape)
    raise UsageError(f"input {x.name!r} has symbolic dims {tuple(str(d) for d in x.shape)}: "
                     f"give concrete ones with --shapes {x.name}=4x5")


def cmd_grad(args: argparse.Namespace) -> int:
    from ..te import dtype as dt
    from ..te.tensor import Tensor

    fn = load_user_op(args.target)
    res = _run_user(Path(args.target.rpartition(":")[0]), f"calling {args.target}", fn)
    if not (isinstance(res, tuple) and len(res) == 2):
        raise UsageError(f"{args.target} must return (outputs, inputs), got {type(res).__name__}")
    outputs, inputs = ([r] if isinstance(r, Tensor) else list(r) if isinstance(r, (list, tuple))
                       else [r] for r in res)
    for t in outputs + inputs:
        if not isinstance(t, Tensor):
            raise UsageError(f"{args.target}: outputs and inputs must be te tensors, "
                             f"got {type(t).__name__}")
    if not outputs:
        raise UsageError(f"{args.target} returned no outputs; return (outputs, inputs)")
    shapes = _parse_shapes(args.shapes)
    unknown = set(shapes) - {x.name for x in inputs}
    if unknown:
        raise UsageError(f"--shapes names {sorted(unknown)} are not inputs "
                         f"({', '.join(x.name for x in inputs)})")
    print(f"seed {args.seed}")
    rng = np.random.default_rng(args.seed)
    arrays = tuple(_random_array(x, _concrete_shape(x, shapes), rng) for x in inputs)
    wrt = [x for x in inputs if dt.is_float(x.dtype)]
    _describe(outputs, inputs, wrt, show_source=not args.no_source)

    f64 = all(o.dtype == "float64" for o in outputs) and all(x.dtype == "float64" for x in wrt)
    tol = 1e-6 if f64 else 2e-2
    print(_banner("numerical check"))
    status, err, note = _user_grad_check(outputs, inputs, arrays, wrt, tol, args.seed)
    print(f"{status}  max rel err {err:.2e} (tolerance {tol:g}){note}" if err is not None
          else f"{status}{note}")
    if not f64:
        print("note: float32 inputs/outputs limit the finite differences; use float64 "
              "placeholders for a tight check")
    return 1 if status == "fail" else 0


def _user_grad_check(outputs: list[Any], inputs: list[Any], arrays: Sequence[np.ndarray],
                     wrt: list[Any], tol: float, seed: int,
                     directions: int = 2) -> tuple[str, float | None, str]:
    """Adjoint kernels vs central differences of <head, f(x)> (`testing.vjp_error`, as
    `testing.check_grad` on registry entries), with symbolic dims bound from the arrays'
    shapes.  Returns (status, max error, note)."""
    from .. import te
    from ..deriv import grad
    from ..te import dtype as dt
    from ..te.expr import Var
    from ..te.work import work
    from ..testing import CachedCPURunner, Status, adjoint_strategy, vjp_error

    outs = [o for o in outputs if dt.is_float(o.dtype)]
    if not wrt or not outs:
        return Status.NONDIFF, None, "  (no float input or no float output)"
    env = {d: n for x, a in zip(inputs, arrays, strict=True)
           for d, n in zip(x.shape, np.shape(a), strict=True) if isinstance(d, Var)}
    heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in outs]
    grads = grad(outs, wrt, head=heads)
    live = [g for g in grads if g is not None]
    worst = vjp_error(outs, inputs, arrays, wrt, grads, heads, CachedCPURunner(),
                      np.random.default_rng(seed + 1), directions)
    ratio = work(live, env) / max(work(outs, env), 1) if live else 0.0
    note = f"  [{adjoint_strategy(grads)} adjoint, adjoint/forward work {ratio:.2f}]"
    return (Status.OK if worst <= tol else Status.FAIL), worst, note


if __name__ == "__main__":
    sys.exit(main())
