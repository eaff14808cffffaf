"""The scheduler: turn a tensor DAG into a `Plan` (pure; emits no source text).

Steps (1-3 and 5 are functions below):

1. `_stages`     - the compute/scatter operations in dependency order, with unique names.
2. `_uses`       - every read of every tensor, with where it happens (under a reduction,
                   in a reduction bound) and its index.
3. `_inline_ok`  - a stage is inlined only if it is an intermediate single-output
                   elementwise compute (no reduction) read exactly once, outside any
                   reduction, at an index that is a permutation of all the reader's
                   data axes: each of its elements is then computed at most once, so
                   inlining never duplicates work.  Read once inside the reader's one
                   reduction, it is inlined when that reduction runs no more iterations
                   than the stage has points (static sizes): a loss summing an elementwise
                   stage, nll's gather of one log_softmax entry per row.  A stage that is one plain read (a
                   copy, broadcast or transpose) or a constant is inlined wherever it
                   is read: a load from its source costs what a load from it would, and
                   the store is saved.  Everything else is materialized.
4. `nest.py`     - compute loop nests: order, the `prange` over fused leading axes, serial
                   stages when small.
5. `_scatter`    - a scatter-add runs in parallel only over an axis that one index dim
                   equals exactly (an injective map, so no two iterations hit the same
                   element); otherwise serially.
Steps 1-5 make the target-neutral plan (`plan_stages`); each target then refines it
(`REFINE`):
6-10. `cpu.py`   - CPU strategies for stages with static sizes: contractions to BLAS (with
                   im2col / a factored contraction for convolutions), row accumulation,
                   split partial sums, accumulator lanes, stages joined into one `prange`,
                   row buffers, blocked scatters, hoisted invariants, reciprocals, workspace.
      `cuda.py`  - the CUDA mapping: data axes fused into the grid, a strategy per stage.

Overrides (`build(..., plan_overrides={stage: {key: value}})`), keys in `OVERRIDE_KEYS`:
`inline` (bool; True only where legal), `parallel` (bool), `fuse` (int, leading axes of
the order flattened into the prange), `order` (list of the stage's axis names),
`blas` (bool: False keeps a contraction in loops), `accumulate` (bool: False keeps the
scalar accumulator per output point, without lanes), `hoist` (bool: False leaves
loop-invariant values in the loop), `reciprocal` (bool: False keeps float32 divisions by
hoisted values), `workspace` (bool: False allocates large intermediates on every call),
`implicit` (bool: False stores a convolution's im2col gather instead of reading its padded
input in place).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ..te.dag import topo_order
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, Var
from ..te.ops import Op
from ..te.printer import expr_str
from ..te.simplify import INDEX_RULES, simplify
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, ScatterUpdate, Tensor
from ..te.visit import bounds_depend_on_axes, children, substitute, transform, walk
from . import cpu, cuda
from .layout import choose_layouts
from .nest import at_most, compute_stage, const_int, loop_extents
from .share import share
from .plan import Inline, Plan, ScatterStage, ScheduleError, Stage, StageKind

OVERRIDE_KEYS = {StageKind.COMPUTE: {"inline", "parallel", "fuse", "order", "blas", "accumulate",
                                      "hoist", "reciprocal", "workspace", "implicit"},
                 StageKind.SCATTER: {"parallel", "workspace"}}
# each target's refine step: the target-neutral plan and the overrides -> the target's plan.
# The one table of them: kernels/backends.py's records read it (Backend.refine).
REFINE: dict[str, Callable[[Plan, Mapping[str, Mapping[str, Any]] | None], Plan]] = {
    "cpu": cpu.refine, "cuda": cuda.refine}


@dataclass(frozen=True)
class _Use:
    reader: ComputeOp | ScatterOp
    read: Read
    under_reduce: bool
    in_bound: bool


def plan_kernel(outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu",
                overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """Schedule `outputs` (computed from the placeholders `inputs`) into a loop-nest plan for
    `target`: the target-neutral plan (`plan_stages`), then the target's refine step."""
    if target not in REFINE:
        raise ScheduleError(f"unknown target {target!r}; choose one of {tuple(REFINE)}")
    return REFINE[target](plan_stages(outputs, inputs, overrides), overrides)


def plan_stages(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """The target-neutral plan: stages, inlining, loop nests and scatters (steps 1-5)."""
    outputs, inputs = tuple(outputs), tuple(inputs)
    _check_io(outputs, inputs)
    ops, names = _stages(outputs)
    for op in ops:
        if any(x.dtype == "float16" for e in _exprs(op) for x in walk(e)):
            raise ScheduleError(f"stage {names[id(op)]!r} computes in float16, which the Numba "
                                f"CPU backend does not support; use float32")
    ov = overrides or {}
    if not isinstance(ov, Mapping) or not all(isinstance(v, Mapping) for v in ov.values()):
        raise ScheduleError(f"plan_overrides must map stage names to dicts of settings, "
                            f"e.g. {{'Y': {{'parallel': False}}}}; got {str(overrides)[:80]}")
    overrides = dict(overrides or {})
    _check_overrides(overrides, ops, names)
    uses = _uses(ops)
    out_ops = {id(t.op) for t in outputs}
    inlined: dict[int, list[_Use]] = {}
    why_kept: dict[int, str] = {}
    for op in ops:
        ov = overrides.get(names[id(op)], {})
        why = _inline_ok(op, uses.get(id(op), []), id(op) in out_ops)
        why_kept[id(op)] = why or "inlining turned off by override"
        want = ov.get("inline", why is None)
        if want and why is not None:
            raise ScheduleError(f"cannot inline stage {names[id(op)]!r}: {why}; "
                                f"remove the 'inline' override")
        if want:
            inlined[id(op)] = uses[id(op)]
    expand = _Expander(set(inlined), names)
    stages: list[Stage] = []
    tensors_of = _tensors_of(outputs)
    for op in ops:
        if id(op) in inlined:
            continue
        ov = overrides.get(names[id(op)], {})
        make = compute_stage if isinstance(op, ComputeOp) else _scatter_stage
        st = make(op, names[id(op)], id(op) in out_ops, expand, ov, tensors_of)  # type: ignore[arg-type]
        if id(op) not in out_ops:
            st = replace(st, notes=(f"materialized: {why_kept[id(op)]}", *st.notes))
        stages.append(st)
    stages = choose_layouts(share(stages))
    by_id = {id(op): op for op in ops}
    inl = tuple(Inline(names[k], ", ".join(dict.fromkeys(names[id(u.reader)] for u in us)),
                       _inline_reason(by_id[k], us)) for k, us in inlined.items())
    return Plan("any", inputs, outputs, _params(inputs, outputs, ops), tuple(stages), inl)


# -- 1. stages and checks ------------------------------------------------------------

def _check_io(outputs: tuple[Tensor, ...], inputs: tuple[Tensor, ...]) -> None:
    if not outputs:
        raise ScheduleError("build needs at least one output tensor")
    for t in (*outputs, *inputs):
        if not isinstance(t, Tensor):
            raise ScheduleError(f"build takes te tensors, got {type(t).__name__} {str(t)[:80]}")
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"input {t.name!r} is not a placeholder; inputs must be "
                                f"te.placeholder tensors (computed tensors are built, not passed)")
    seen: set[int] = set()
    for t in inputs:
        if id(t) in seen:
            raise ScheduleError(f"input {t.name!r} is listed twice in inputs")
        seen.add(id(t))
    missing = [t.name for t in topo_order(outputs)
               if isinstance(t.op, PlaceholderOp) and id(t) not in seen]
    if missing:
        raise ScheduleError(f"placeholder(s) {missing} are read by the outputs but not listed "
                            f"in inputs; add them to the inputs list")
    for t in topo_order(outputs):
        if t.dtype == "float16":
            raise ScheduleError(f"tensor {t.name!r} is float16, which the Numba CPU backend does "
                                f"not support; use float32")


def _stages(outputs: tuple[Tensor, ...]) -> tuple[list[ComputeOp | ScatterOp], dict[int, str]]:
    ops: list[ComputeOp | ScatterOp] = []
    seen: set[int] = set()
    for t in topo_order(outputs):
        if isinstance(t.op, (ComputeOp, ScatterOp)) and id(t.op) not in seen:
            seen.add(id(t.op))
            ops.append(t.op)
    names: dict[int, str] = {}
    taken: set[str] = set()
    for op in ops:
        n, k = op.name, 1
        while n in taken:
            n, k = f"{op.name}_{k}", k + 1
        taken.add(n)
        names[id(op)] = n
    return ops, names


def _check_overrides(ov: dict[str, Mapping[str, Any]], ops: list, names: dict[int, str]) -> None:
    by_name = {names[id(op)]: op for op in ops}
    for stage, keys in ov.items():
        if stage not in by_name:
            raise ScheduleError(f"plan_overrides names stage {stage!r}, which is not in this "
                                f"kernel; stages: {sorted(by_name)}")
        kind = StageKind.COMPUTE if isinstance(by_name[stage], ComputeOp) else StageKind.SCATTER
        bad = set(keys) - OVERRIDE_KEYS[kind]
        if bad:
            raise ScheduleError(f"plan_overrides[{stage!r}]: unknown key(s) {sorted(bad)} for a "
                                f"{kind.value} stage; allowed: {sorted(OVERRIDE_KEYS[kind])}")


# -- 2. uses --------------------------------------------------------------------------

def _exprs(op: ComputeOp | ScatterOp) -> tuple[Expr, ...]:
    return op.body if isinstance(op, ComputeOp) else op.exprs


def _uses(ops: list[ComputeOp | ScatterOp]) -> dict[int, list[_Use]]:
    """Every read occurrence (a tree count: a read written twice is two uses), by producer op."""
    out: dict[int, list[_Use]] = {}
    for op in ops:
        es = _exprs(op)
        relevant = _reads_stage(es)
        stack = [(e, False, False) for e in reversed(es)]
        if isinstance(op, ScatterOp):  # a ragged domain (`k < L[i]`) reads L in its bounds
            stack += [(b, True, True) for ax in reversed(op.axis) for b in (ax.extent, ax.lo)]
        while stack:  # preorder, as a recursive walk would visit
            e, under, bound = stack.pop()
            if not relevant.get(id(e), True):  # reduce-axis bounds are not walked
                continue
            if isinstance(e, Read):
                out.setdefault(id(e.tensor.op), []).append(_Use(op, e, under, bound))
            kids = [(c, under or isinstance(e, Reduce), bound) for c in children(e)]
            if isinstance(e, Reduce):
                kids = [(b, True, True) for ax in e.axis for b in (ax.lo, ax.extent)] + kids
            stack.extend(reversed(kids))
    return out


def _reads_stage(es: Sequence[Expr]) -> dict[int, bool]:
    """id(node) -> whether its tree may hold a read of a computed tensor (placeholder reads never
    matter to inlining; skipping their subtrees keeps the tree walk of `_uses` small)."""
    flag: dict[int, bool] = {}
    for e in es:
        for x in walk(e):
            flag[id(x)] = isinstance(x, Reduce) or (
                isinstance(x, Read) and not isinstance(x.tensor.op, PlaceholderOp)) or any(
                flag[id(c)] for c in children(x))
    return flag


# -- 3. inlining ----------------------------------------------------------------------

def _inline_ok(op: ComputeOp | ScatterOp, uses: list[_Use], is_output: bool) -> str | None:
    """None if `op` may be inlined into its single reader, else the reason it may not."""
    if isinstance(op, ScatterOp):
        return "a scatter-add is always materialized"
    if is_output:
        return "it is an output of the kernel"
    if len(op.body) > 1:
        return "it has several outputs"
    if any(isinstance(x, Reduce) for x in walk(op.body[0])):
        return "it contains a reduction (inlining could repeat its work)"
    if _plain_read(op.body[0]) and not any(u.in_bound for u in uses):
        return None  # a copy/broadcast/transpose: re-reading its source costs what reading it would
    if _one_point(uses):
        uses = uses[:1]  # one value read several times at one point: rendered once (a local)
    if len(uses) != 1:
        return f"it is read {len(uses)} times (inlining would recompute it)"
    u = uses[0]
    if u.in_bound or (u.under_reduce and not _reduction_reads_fewer(op, u)):
        return "it is read inside a reduction (inlining would recompute it per iteration)"
    if u.under_reduce:
        return None
    ix = u.read.indices
    if not (all(isinstance(i, IterVar) and i.kind == "data" for i in ix)
            and len(set(ix)) == len(ix) == len(u.reader.axis) and set(ix) == set(u.reader.axis)):
        return f"it is read at {expr_str(u.read)}, not at a permutation of the reader's axes"
    return None


def _one_point(uses: list[_Use]) -> bool:
    """All uses are one reader's reads at the same indices outside any reduction (`y * sigmoid(y)`
    of a normalization's output): the renderer binds the repeated value to a local."""
    u0 = uses[0]
    return len(uses) > 1 and all(u.reader is u0.reader and u.read.same_as(u0.read)
                                 and not (u.under_reduce or u.in_bound) for u in uses)


def _reduction_reads_fewer(op: ComputeOp, u: _Use) -> bool:
    """The reader has one reduction and runs no more iterations (its points times the
    reduction's) than `op` has points, at every size (`nest.at_most`): inlined, `op`'s body is
    evaluated at most as often as materializing it would evaluate it, and nothing is stored."""
    if not isinstance(u.reader, ComputeOp):
        return False
    if len({x.loop_key for b in u.reader.body for x in walk(b) if isinstance(x, Reduce)}) != 1:
        return False
    return at_most(loop_extents(u.reader.axis, u.reader.body), loop_extents(op.axis, ()))


def _inline_reason(op: ComputeOp, us: list[_Use]) -> str:
    """Why `op`, read by `us`, is inlined (the plan's `inlined` lines)."""
    if (len(us) == 1 or _one_point(us)) and not us[0].under_reduce:
        return (f"read {'once' if len(us) == 1 else f'{len(us)} times at one point'}, outside "
                f"any reduction, at the reader's own data axes ({expr_str(us[0].read)})")
    if _plain_read(op.body[0]):
        return ("a plain read of its source (copy, broadcast, transpose): re-reading the "
                "source where it is used costs what reading it back would")
    return (f"read once per iteration of its reader's reduction ({expr_str(us[0].read)}), "
            f"which runs no more iterations than it has points")


def _plain_read(e: Expr) -> bool:
    """A constant, or one read at indices computed from loop axes only (no data-dependent index)."""
    if isinstance(e, Call) and e.op is Op.STOP_GRADIENT:  # an identity to the kernels
        e = e.args[0]
    return isinstance(e, Const) or (isinstance(e, Read) and not any(
        isinstance(x, Read) for i in e.indices for x in walk(i)))


def _simplify_indices(x: Expr) -> Expr | None:
    """Reads with simplified indices: substituting a reshape's flat index into its reader's
    unflattening (`(64*i + j) // 64`) leaves div/mod chains that simplify to the axes, and an
    adjoint's inverted index map recombines them (`8 * (f // 8) + f % 8` -> `f`)."""
    if isinstance(x, Read) and x.indices:
        idx = tuple(simplify(i, INDEX_RULES) for i in x.indices)
        if any(a is not b for a, b in zip(idx, x.indices)):
            return Read(x.tensor, idx, x.dtype)
    return None


class _Expander:
    """Substitute inlined stages into expressions, memoized: each inlined stage's body is
    expanded once (producers first, with an explicit stack, so chains of any length work),
    then instantiated at each read."""

    def __init__(self, inlined: set[int], names: dict[int, str]) -> None:
        self.inlined, self.names = inlined, names
        self.bodies: dict[int, Expr] = {}  # id(inlined op) -> body with inlined reads expanded

    def __call__(self, e: Expr) -> Expr:
        self._expand_producers([e])
        return transform(transform(e, self._instantiate), _simplify_indices)

    def _instantiate(self, x: Expr) -> Expr | None:
        if isinstance(x, Read) and id(x.tensor.op) in self.inlined:
            op = x.tensor.op
            body = substitute(self.bodies[id(op)], dict(zip(op.axis, x.indices, strict=True)))
            return transform(body, _simplify_indices)
        return None

    def _inlined_reads(self, es: Sequence[Expr]) -> list[Any]:
        return list({id(x.tensor.op): x.tensor.op for e in es for x in walk(e)
                     if isinstance(x, Read) and id(x.tensor.op) in self.inlined}.values())

    def _expand_producers(self, es: Sequence[Expr]) -> None:
        stack = [(op, False) for op in self._inlined_reads(es)]
        while stack:
            op, ready = stack.pop()
            if id(op) in self.bodies:
                continue
            if ready:
                self.bodies[id(op)] = transform(op.body[0], self._instantiate)
                continue
            stack.append((op, True))
            stack.extend((p, False) for p in self._inlined_reads(op.body) if id(p) not in self.bodies)

    def names_in(self, exprs: Sequence[Expr]) -> tuple[str, ...]:
        """Names of the inlined stages read (directly or through each other) by `exprs`."""
        found: dict[str, None] = {}
        stack = list(reversed(self._inlined_reads(exprs)))
        while stack:
            op = stack.pop()
            if self.names[id(op)] in found:
                continue
            found[self.names[id(op)]] = None
            stack.extend(reversed(self._inlined_reads(op.body)))
        return tuple(found)


# -- 5. scatter -------------------------------------------------------------------------

def _scatter_stage(op: ScatterOp, name: str, is_output: bool, expand: _Expander,
                   ov: Mapping[str, Any], tensors_of: dict[tuple[int, int], Tensor]) -> ScatterStage:
    updates = tuple(ScatterUpdate(tuple(expand(i) for i in u.index), expand(u.value),
                                  expand(u.condition)) for u in op.updates)
    for u in updates:
        if any(isinstance(x, Reduce) for e in u.exprs for x in walk(e)):
            raise ScheduleError(f"scatter {name!r}: reductions inside a scatter are not supported; "
                                f"compute them in a stage of their own")
    notes: list[str] = [f"override {k}={v!r}" for k, v in ov.items()]
    axes = set(op.axis)
    cands = [(ix, d) for d, ix in enumerate(updates[0].index)  # index dim d of every update
             if isinstance(ix, IterVar) and ix in axes and all(u.index[d].same_as(ix) for u in updates)
             and not bounds_depend_on_axes(ix)]
    # the longest such axis (a batch dim of 1 leaves nothing to share); unknown extents count long
    cand, dim = max(cands, key=lambda c: const_int(c[0].extent) or 1 << 62, default=(None, -1))
    want = ov.get("parallel", cand is not None)
    if want and cand is None:
        idx = "; ".join("[" + ", ".join(expr_str(i) for i in u.index) + "]" for u in updates)
        raise ScheduleError(f"scatter {name!r}: no axis maps injectively to an index dim "
                            f"(index {idx}), so a parallel scatter would race; remove the "
                            f"'parallel' override")
    if not want:
        cand, dim = None, -1
        notes.append("serial: no index dim is exactly one loop axis (a parallel loop would race)"
                     if "parallel" not in ov else "serial by override")
    order = tuple(op.axis) if cand is None else (cand, *[a for a in op.axis if a is not cand])
    return ScatterStage(name, tensors_of[(id(op), 0)], tuple(op.shape), order, updates,
                        cand, dim, is_output, expand.names_in(op.exprs), tuple(notes))


# -- symbolic dims ------------------------------------------------------------------------

def _vars(e: Expr, out: dict[Var, None]) -> None:
    for x in walk(e):
        if isinstance(x, Var):
            out[x] = None
        elif isinstance(x, IterVar):
            _vars(x.lo, out)
            _vars(x.extent, out)
        elif isinstance(x, Reduce):
            for a in x.axis:
                _vars(a.lo, out)
                _vars(a.extent, out)


def _params(inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...],
            ops: list[ComputeOp | ScatterOp]) -> tuple[Var, ...]:
    """Symbolic dims, in order of first appearance as an input dimension; all must be bound."""
    bound: dict[Var, None] = {}
    for t in inputs:
        for s in t.shape:
            if isinstance(s, Var):
                bound[s] = None
    used: dict[Var, None] = {}
    for t in topo_order(outputs):
        for s in t.shape:
            _vars(s, used)
    for op in ops:
        for e in _exprs(op):
            _vars(e, used)
        for a in op.axis:
            _vars(a, used)
        if isinstance(op, ScatterOp):
            for s in op.shape:
                _vars(s, used)
    for t in inputs:
        for s in t.shape:
            _vars(s, used)
    free = [v.name for v in used if v not in bound]
    if free:
        raise ScheduleError(f"symbolic dim(s) {free} are used by the kernel but are not a "
                            f"dimension of any input, so they cannot be bound from the input "
                            f"shapes; make each one the size of some input dimension")
    return tuple(bound)


def _tensors_of(outputs: tuple[Tensor, ...]) -> dict[tuple[int, int], Tensor]:
    """(op id, value index) -> tensor, for the tensors reachable from the outputs."""
    return {(id(t.op), t.value_index): t for t in topo_order(outputs)}
