"""The CUDA renderer: the expression rules of `numba.cuda` kernels and the pass that writes
one `@cuda.jit` kernel per stage and the host function that launches them.

Generated module: device helpers, one `@cuda.jit` kernel per materialized stage,
`SIGNATURES` (argument dtypes and ranks of each kernel, for `compile_ptx`), and a
host function `texpr_kernel(inputs..., dims...)` that allocates the intermediates
and outputs as device arrays and launches the kernels in order on the default
stream.  How each stage runs (thread per point, block tree reduction, injective or
atomic scatter) is decided in `texpr_ad.schedule.cuda`; this module spells it out.
The runtime the generated module calls is `kernels/cuda_runtime.py`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..schedule.checks import node_checks
from ..schedule.contraction import Role, SumOfProduct
from ..schedule.cuda import (BlockFold, BlockPoints, BlockShared, FirstThread, Grid, Products,
                             Single, Slices, StageSlice, Tiles, TileStores, stage_nodes,
                             tile_counts)
from ..schedule.stageloops import Adds
from ..schedule.nest import const_int
from ..schedule.plan import ComputeStage, CudaStrategy, Plan, ScatterStage, Stage, Tile, wide_sum
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, always
from ..te.ops import Op
from ..te.visit import walk
from .render import (ERR_NAME, EXPR_RULES, KERNEL_NAME, WIDE_ZERO, Renderer, RenderPass, Rule,
                     is_atom, is_placeholder, read_site, top)


# -- expression table: numba.cuda lacks most NumPy ufuncs in kernels, so use math.* ------------

def _math(name: str) -> Rule:
    return lambda e, a: f"math.{name}({a[0]})"


_BIG = "4503599627370496.0"  # 2**52: floats at least this large (and inf, nan) are integral


def _integral(fn: str) -> Rule:
    """floor/ceil/trunc keeping the float type (math.* return int64 in Numba), exact for every
    float; the identity on integers."""
    def rule(e: Call, a: list[str]) -> str:
        x = a[0]
        if not e.dtype.startswith("float"):
            return x
        call = f"math.{fn}({x})" if fn != "trunc" else f"np.int64({x})"  # np.float32 lacks __trunc__
        return f"(np.{e.dtype}({call}) if abs({x}) < {_BIG} else {x})"
    return rule


def _rint(e: Call, a: list[str]) -> str:  # half to even, like np.rint
    x, t = a[0], e.dtype
    if not t.startswith("float"):
        return x
    f = f"np.{t}(math.floor({x}))"
    up = f"({x} - {f} > 0.5 or ({x} - {f} == 0.5 and math.fmod({f}, 2.0) != 0.0))"
    return f"({x} if not abs({x}) < {_BIG} else ({f} + np.{t}(1.0) if {up} else {f}))"


def _sign(e: Call, a: list[str]) -> str:  # nan and +-0 map to themselves, like np.sign
    x, t = a[0], e.dtype
    if t.startswith("float"):
        return f"(np.{t}(1.0) if {x} > 0 else (np.{t}(-1.0) if {x} < 0 else {x}))"
    return f"(1 if {x} > 0 else (-1 if {x} < 0 else 0))"


def _one(dtype: str) -> str:
    return f"np.{dtype}(1.0)"


CUDA_RULES: dict[Op, Rule] = {
    **EXPR_RULES,
    Op.FLOORDIV: lambda e, a: (_integral("floor")(e, [f"({a[0]} / {a[1]})"])
                               if e.dtype.startswith("float") else f"({a[0]} // {a[1]})"),
    # builtin min/max and int() go through device functions, which compile_ptx cannot build
    # without a GPU (see helper_decorator); the ufuncs inline (and propagate NaN like the CPU)
    Op.MIN: lambda e, a: f"np.minimum({a[0]}, {a[1]})",
    Op.MAX: lambda e, a: f"np.maximum({a[0]}, {a[1]})",
    Op.EXP: _math("exp"), Op.LOG: _math("log"), Op.LOG1P: _math("log1p"), Op.SQRT: _math("sqrt"),
    Op.RSQRT: lambda e, a: f"({_one(e.dtype)} / math.sqrt({a[0]}))",
    Op.TANH: _math("tanh"),
    Op.SIGMOID: lambda e, a: f"({_one(e.dtype)} / ({_one(e.dtype)} + math.exp(-{a[0]})))",
    Op.SIN: _math("sin"), Op.COS: _math("cos"), Op.ATAN: _math("atan"),
    Op.FLOOR: _integral("floor"), Op.CEIL: _integral("ceil"), Op.TRUNC: _integral("trunc"),
    Op.ROUND: _rint, Op.SIGN: _sign, Op.STOP_GRADIENT: lambda e, a: a[0],
    Op.TAN: _math("tan"), Op.SINH: _math("sinh"), Op.COSH: _math("cosh"), Op.ASIN: _math("asin"),
    Op.ACOS: _math("acos"), Op.ASINH: _math("asinh"), Op.ACOSH: _math("acosh"),
    Op.ATANH: _math("atanh"), Op.ATAN2: lambda e, a: f"math.atan2({a[0]}, {a[1]})",
    Op.ISNAN: _math("isnan"),
}

# -- the renderer -------------------------------------------------------------------------------

class CUDARenderer(Renderer):
    """`numba.cuda.jit`: a grid-stride outer loop, guards by `range`, `cuda.atomic.add` scatters.

    `reduce_block` is the shared-memory size of block reductions (a power of two);
    the launcher may run them with fewer threads (any power of two up to it).
    """

    target = "cuda"
    header = ("import math", "import numpy as np", "from numba import cuda",
              "from texpr_ad.kernels.numba_cuda import device_copy, empty, launch, zeros")
    # No helper functions: calling a device function (cuda.jit(device=True), and also
    # register_jitable) compiles it for the *current* device, so compile_ptx would need a GPU.
    # Helpers are written as expressions instead (LLVM removes the repeated subexpressions).
    helper_decorator = ""
    # a data-dependent index out of bounds sets err[0] (and reads element 0 instead)
    # (err[3s] = 1, err[3s + 1] = the largest and err[3s + 2] = the smallest offending index)
    check_index = ("({i} if 0 <= {i} < {n} else cuda.atomic.max({err}, {s3}, 1) * 0 + "
                   "cuda.atomic.max({err}, {s3} + 1, {i}) * 0 + cuda.atomic.min({err}, {s3} + 2, {i}) * 0)")
    kernel_decorator = "@cuda.jit"
    parallel_loop = ("for {var} in range(cuda.grid(1), {extent}, cuda.gridsize(1)):",)
    block_loop = ("for {var} in range(cuda.blockIdx.x, {extent}, cuda.gridDim.x):",)
    thread_loop = ("for {var} in range(cuda.threadIdx.x, {extent}, cuda.blockDim.x):",)
    single_guard = "if cuda.grid(1) == 0:"
    scatter_add = "{target} += {value}"
    atomic_add = "cuda.atomic.add({array}, {index}, {value})"
    alloc_empty = "empty({shape}, np.{dtype})"
    alloc_zeros = "zeros({shape}, np.{dtype})"
    rules = CUDA_RULES
    reduce_block = 256

    def render(self, plan: Plan) -> str:
        return _CudaRender(self, plan).source()


@dataclass
class _Kernel:
    name: str
    lines: list[str]
    args: list[tuple[str, str, int]]  # (name, dtype, ndim); ndim 0 = scalar param
    launch: str


class _CudaRender(RenderPass):
    r: CUDARenderer

    def __init__(self, r: CUDARenderer, plan: Plan) -> None:
        super().__init__(r, plan)
        self.loop_lines: tuple[str, ...] = r.parallel_loop
        self.site_extent: list[str] = []  # the extent each check compares with (host source)
        # a block reduction's names (block_shared_node): its thread index, tree step and chunk,
        # its values' shared arrays and partials in fold order, how many values folds have taken
        self.tid = self.step = self.chunk = ""
        self.shared: list[str] = []
        self.parts: list[tuple[str, str]] = []
        self.taken = 0
        self.tn: _TileNames  # a TILE kernel's (tiles_node)

    def parallel_head(self, depth: int, var: str, extent: str) -> None:
        for line in self.loop_lines:
            self.emit(depth, line.format(var=var, extent=extent))

    # -- top level -----------------------------------------------------------------------
    def source(self) -> str:
        p = self.plan
        ins = [self.tensor(t) for t in p.inputs]
        dims = [self.names.get(v, v.name) for v in p.params]
        host: list[str] = []
        kernels: list[_Kernel] = []
        for st in p.stages:
            self.scope = st.name
            self.unproven = (p.checks.get(st.name) or node_checks([st], False)).unproven
            outs = list(st.tensors) if isinstance(st, ComputeStage) else [st.tensor]
            parts: list[tuple[str, str]] = []
            if isinstance(st, ComputeStage) and st.cuda and st.cuda.split > 1:
                self.lines, self.checked, first = [], False, len(self.sites)
                self.emit(1, f"# stage {st.name}: block, partials of {st.cuda.split} chunks per point")
                self.nodes(1, stage_nodes(st, partial=True), st, {})
                launch = (f"launch({{k}}, ({self.points(st.order)}) * {st.cuda.split}, "
                          f"{self.r.reduce_block})")
                parts = self.parts
                for name, dtype in parts:
                    shape = self.shape([*t_shape(st), Const(st.cuda.split, "int64")])
                    host.append(f"    {name} = {self.r.alloc_empty.format(shape=shape, dtype=dtype)}")
                self.add_kernel(st, f"k_{st.name}_part", launch,
                                [(n, d, len(t_shape(st)) + 1) for n, d in parts], dims, host, kernels, first)
            self.lines, self.checked, first = [], False, len(self.sites)
            for t, dtype in self.allocations(st):
                shape = self.shape(t_shape(st))
                tmpl = self.r.alloc_empty if isinstance(st, ComputeStage) else self.r.alloc_zeros
                host.append(f"    {self.tensor(t)} = {tmpl.format(shape=shape, dtype=dtype)}")
            launch = self.compute(st) if isinstance(st, ComputeStage) else self.scatter(st)
            self.add_kernel(st, f"k_{st.name}", launch,
                            [(n, d, len(t_shape(st)) + 1) for n, d in parts] +
                            [(self.tensor(t), t.dtype, max(t.ndim, 1)) for t in outs if t is not None],
                            dims, host, kernels, first)
        rets = [self.tensor(t) if not is_placeholder(t) else f"device_copy({self.tensor(t)})"
                for t in p.outputs]
        out = [f"# generated by texpr_ad ({self.r.target}); outputs: "
               f"{', '.join(t.name for t in p.outputs)}", *self.r.header]
        for k in kernels:
            out += ["", "", self.r.kernel_decorator,
                    f"def {k.name}({', '.join(a[0] for a in k.args)}):", *k.lines]
        out += ["", "", "SIGNATURES = {"]
        out += [f"    {k.name!r}: {tuple((d, n) for _, d, n in k.args)!r}," for k in kernels]
        out += ["}", "", "", f"def {KERNEL_NAME}({', '.join(ins + dims)}):"]
        if self.any_check:
            out.append(f"    {ERR_NAME} = zeros({3 * len(self.sites)}, np.int64)")
        out += host
        out.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
        return "\n".join(out) + "\n"

    def add_kernel(self, st: ComputeStage | ScatterStage, kname: str, launch: str,
                   writes: list[tuple[str, str, int]], dims: list[str],
                   host: list[str], kernels: list[_Kernel], first_site: int) -> None:
        """Close the kernel in `self.lines`: its arguments (the tensors the stage reads, then
        `writes`, the error array, the size parameters), its launch and its index checks."""
        kname = self.names.fresh(kname)
        outs = list(st.tensors) if isinstance(st, ComputeStage) else [st.tensor]
        reads = [t for t in _reads(st) if all(t is not o for o in outs)]
        args = [(self.tensor(t), t.dtype, max(t.ndim, 1)) for t in _unique(reads)] + writes
        if self.checked:
            args.append((ERR_NAME, "int64", 1))
        args += [(d, "int64", 0) for d in dims]
        kernels.append(_Kernel(kname, self.lines, args, launch))
        host.append(f"    {launch.format(k=kname)}({', '.join(a[0] for a in args)})")
        if self.checked:
            host.append(f"    errh = {ERR_NAME}.copy_to_host()")
        for s in range(first_site, len(self.sites)):
            site, n = self.sites[s], self.site_extent[s]
            host.append(f"    if errh[{3 * s}] != 0:")
            host.append(f"        raise IndexError({site!r}, errh[{3 * s + 2}] if errh[{3 * s + 2}] < 0 "
                        f"else errh[{3 * s + 1}], {n})")

    def allocations(self, st: ComputeStage | ScatterStage) -> list[tuple[Any, str]]:
        if isinstance(st, ScatterStage):
            pairs = [(st.tensor, st.tensor.dtype)]
        else:
            pairs = [(t, b.dtype) for t, b in zip(st.tensors, st.bodies, strict=True) if t is not None]
        return [(t, d if d != "bool" else "bool_") for t, d in pairs]

    def check(self, i: str, n: str, site: str) -> str:
        self.checked = self.any_check = True
        self.sites.append(site)
        self.site_extent.append(n)
        return self.r.check_index.format(i=i if is_atom(i) else f"({i})", n=n, err=ERR_NAME,
                                         s3=3 * (len(self.sites) - 1))

    def expr(self, e: Expr, env: dict[Expr, str]) -> str:
        if isinstance(e, Read) and e not in env and (e in self.unproven or any(
                isinstance(x, Read) for i in e.indices for x in walk(i))):
            parts = []
            for d, i in enumerate(e.indices):
                s = top(super().expr(i, env))
                if any(isinstance(x, Read) for x in walk(i)) or d in self.unproven.get(e, ()):
                    s = self.check(s, f"{self.tensor(e.tensor)}.shape[{d}]", read_site(e, d, self.scope))
                parts.append(s)
            return f"{self.tensor(e.tensor)}[{', '.join(parts)}]"
        return super().expr(e, env)

    # -- compute stages ---------------------------------------------------------------------
    def compute(self, st: ComputeStage) -> str:
        how = st.cuda.strategy  # type: ignore[union-attr]
        self.emit(1, f"# stage {st.name}: {how}" + (f"; inlined {', '.join(st.inlined)}"
                                                   if st.inlined else ""))
        nodes = stage_nodes(st)
        self.nodes(1, nodes, st, {})
        if how is CudaStrategy.TILE:
            return f"launch({{k}}, {math.prod(self.tn.counts)}, {self.tn.t.threads ** 2})"
        if how is CudaStrategy.BLOCK:
            return f"launch({{k}}, {self.points(st.order)}, {self.r.reduce_block})"
        return self.grid_launch(nodes[0])

    def points(self, axes: Sequence[IterVar]) -> str:
        return " * ".join(top(self.expr(a.extent, {})) for a in axes) or "1"

    def grid_launch(self, node: Grid | Single) -> str:
        """A thread per point of a `Grid`'s axes, or one thread (`Single`)."""
        return f"launch({{k}}, {self.points(node.axes)}, 0)" if isinstance(node, Grid) else \
            "launch({k}, 1, 1)"

    def grid_node(self, n: Grid, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        self.loop_lines = self.r.parallel_loop
        self.nodes(self.parallel_nest(depth, n.axes, st.name), n.body, st, env)

    def single_node(self, n: Single, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        self.emit(depth, self.r.single_guard)
        self.nodes(depth + 1, n.body, st, env)

    def block_shared_node(self, n: BlockShared, depth: int, st: Stage, env: dict[Expr, str]
                          ) -> None:
        """A block reduction's shared arrays (and, `partial`, its partials: `self.parts`, which
        the second kernel's folds read) and the thread index."""
        self.tid, self.step = self.names.fresh("tid"), self.names.fresh("s")
        self.shared, self.taken, parts = [], 0, []
        for red in n.groups:
            for src in red[0].source:
                sh = self.names.fresh(f"{st.name}_sh")
                dtype = "float64" if wide_sum(red[0]) else src.dtype if src.dtype != "bool" else "bool_"
                self.emit(depth, f"{sh} = cuda.shared.array({self.r.reduce_block}, np.{dtype})")
                self.shared.append(sh)
                if n.partial:
                    parts.append((self.names.fresh(f"{st.name}_part"), dtype))
        if n.partial:
            self.parts = parts
        self.emit(depth, f"{self.tid} = cuda.threadIdx.x")

    def block_points_node(self, n: BlockPoints, depth: int, st: Stage, env: dict[Expr, str]
                          ) -> None:
        if n.partial:
            self.chunk = chunk = self.names.fresh("chunk")
            if n.axes:
                b = self.names.fresh(f"{st.name}_b")
                self.loop_lines = (f"for {b} in range(cuda.blockIdx.x, ({{extent}}) * {n.split}, "
                                   f"cuda.gridDim.x):", f"    {{var}} = {b} // {n.split}",
                                   f"    {chunk} = {b} % {n.split}")
                depth = self.parallel_nest(depth, n.axes, st.name)
            else:
                self.emit(depth, f"for {chunk} in range(cuda.blockIdx.x, {n.split}, cuda.gridDim.x):")
                depth += 1
        elif n.axes:
            self.loop_lines = self.r.block_loop
            depth = self.parallel_nest(depth, n.axes, st.name)
        self.nodes(depth, n.body, st, env)

    def block_fold_node(self, n: BlockFold, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        """Each thread's stride of the reduction (or of the point's partials) into accumulators,
        combined in a shared-memory tree; then the chunk's partial written (`partial`), or the
        result rounded, its init folded in and bound in `env`."""
        r, name, tid, step = n.group[0], st.name, self.tid, self.step
        comb, k = r.combiner, len(r.source)
        shs, gp = self.shared[self.taken: self.taken + k], self.parts[self.taken: self.taken + k]
        self.taken += k
        idx = ", ".join(self.axis(a) for a in st.axes)  # type: ignore[union-attr]
        wide = wide_sum(r)  # float64 partial sums per thread and in the tree, rounded once
        accs = [self.names.fresh(f"{name}_acc" if k == 1 else f"{name}_acc{j}") for j in range(k)]
        for a, ident in zip(accs, comb.identity, strict=True):
            self.emit(depth, f"{a} = {WIDE_ZERO if wide else top(self.expr(ident, {}))}")
        if n.from_parts:  # combine this point's partials
            c = self.names.fresh("c")
            self.emit(depth, f"for {c} in range({tid}, {n.split}, cuda.blockDim.x):")
            srcs = [f"{p}[{idx + ', ' if idx else ''}{c}]" for p, _ in gp]
            self.combine(depth + 1, comb, accs, srcs, accs, name)
        else:
            self.loop_lines = self.r.thread_loop if not n.partial else (
                f"for {{var}} in range({self.chunk} * cuda.blockDim.x + cuda.threadIdx.x, "
                f"{{extent}}, {n.split} * cuda.blockDim.x):",)
            d = self.parallel_nest(depth, r.axis[:n.flat], name)
            for ax in r.axis[n.flat:]:
                self.range_loop(d, ax, env)
                d += 1
            if not always(r.condition):
                self.emit(d, f"if {top(self.expr(r.condition, env))}:")
                d += 1
            self.combine(d, comb, accs, [self.expr(s, env) for s in r.source], accs, name)
        for sh, a in zip(shs, accs, strict=True):
            self.emit(depth, f"{sh}[{tid}] = {a}")
        self.emit(depth, "cuda.syncthreads()")
        self.emit(depth, f"{step} = cuda.blockDim.x // 2")
        self.emit(depth, f"while {step} > 0:")
        self.emit(depth + 1, f"if {tid} < {step}:")
        tmps = [self.names.fresh(f"{name}_t") for _ in shs]
        self.combine(depth + 2, comb, [f"{sh}[{tid}]" for sh in shs],
                     [f"{sh}[{tid} + {step}]" for sh in shs], tmps, name)
        for sh, t in zip(shs, tmps, strict=True):
            self.emit(depth + 2, f"{sh}[{tid}] = {t}")
        self.emit(depth + 1, "cuda.syncthreads()")
        self.emit(depth + 1, f"{step} //= 2")
        for sh, a in zip(shs, accs, strict=True):
            self.emit(depth, f"{a} = {sh}[0]")
        self.emit(depth, "cuda.syncthreads()")  # shared memory is reused by the next point
        if n.partial:
            self.emit(depth, f"if {tid} == 0:")
            for (p, _), a in zip(gp, accs, strict=True):
                self.emit(depth + 1, f"{p}[{idx + ', ' if idx else ''}{self.chunk}] = {a}")
            return
        if wide:
            accs = [self.narrow(depth, r, accs[0], name)]
        if r.init:
            self.combine(depth, comb, [self.expr(i, env) for i in r.init], accs, accs, name)
        for g in n.group:
            env[g] = accs[g.value_index]

    def first_thread_node(self, n: FirstThread, depth: int, st: Stage, env: dict[Expr, str]
                          ) -> None:
        self.emit(depth, f"if {self.tid} == 0:")
        self.nodes(depth + 1, n.body, st, env)

    def tiles_node(self, n: Tiles, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        """The tile kernel's names (`self.tn`), the shared slices, the thread's place in its
        block, the loop over the tiles and the accumulators."""
        f, t, name, fresh = n.form, n.tile, st.name, self.names.fresh
        sh = [fresh(f"{name}_{x}") for x in "ab"]
        tid, tx, ty, tile, k0 = (fresh(f"{name}_{x}") for x in ("tid", "tx", "ty", "tile", "k0"))
        cells = [(r, c) for r in range(t.reg) for c in range(t.reg)]
        acc = {rc: fresh(f"{name}_acc{rc[0]}{rc[1]}") for rc in cells}
        chain = {rc: fresh(f"{name}_c{rc[0]}{rc[1]}") for rc in cells} if wide_sum(f.body) else acc
        self.tn = tn = _TileNames(f, t, sh, tid, tx, ty, tile, k0, acc, chain)
        dt, (bn, mt, ntn) = f.body.dtype, tn.counts
        for x in tn.sh:
            self.emit(depth, f"{x} = cuda.shared.array(({t.depth}, {t.size + 1}), np.{dt})")
        self.emit(depth, f"{tid} = cuda.threadIdx.x")
        self.emit(depth, f"{tx} = {tid} % {t.threads}")
        self.emit(depth, f"{ty} = {tid} // {t.threads}")
        self.emit(depth, f"for {tile} in range(cuda.blockIdx.x, {bn * mt * ntn}, cuda.gridDim.x):")
        tn.m0, tn.n0 = fresh(f"{name}_m0"), fresh(f"{name}_n0")
        self.emit(depth + 1, f"{tn.m0} = {tile} // {ntn} % {mt} * {t.size}")
        self.emit(depth + 1, f"{tn.n0} = {tile} % {ntn} * {t.size}")
        self.unflatten(depth + 1, f"({tile} // {mt * ntn})", f.axes(Role.BATCH))
        for rc in cells:
            self.emit(depth + 1, f"{acc[rc]} = {WIDE_ZERO if tn.wide else f'np.{dt}(0.0)'}")
        self.nodes(depth + 1, n.body, st, env)

    def slices_node(self, n: Slices, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        tn, t, f = self.tn, self.tn.t, self.tn.f
        self.emit(depth, f"for {tn.k0} in range(0, {_count(f.axes(Role.K))}, {t.depth}):")
        if tn.wide:
            for rc in tn.chain:
                self.emit(depth + 1, f"{tn.chain[rc]} = np.{f.body.dtype}(0.0)")
        self.nodes(depth + 1, n.body, st, env)

    def stage_slice_node(self, n: StageSlice, depth: int, st: Stage, env: dict[Expr, str]
                         ) -> None:
        """Operand `n.operand`'s slice into shared array `sh[kk, d]`: its factor read at the
        tile's own axes (M or N, from the tile's origin) and the slice's K axes."""
        tn, t, f = self.tn, self.tn.t, self.tn.f
        sh, factor = tn.sh[n.operand], f.body.source[0].args[n.operand]  # type: ignore[attr-defined]
        axes, origin, k_axes = f.axes((Role.M, Role.N)[n.operand]), (tn.m0, tn.n0)[n.operand], \
            f.axes(Role.K)
        e, d, kk = (self.names.fresh(f"{sh}_{x}") for x in ("e", "d", "kk"))
        self.emit(depth, f"for {e} in range(cuda.threadIdx.x, {t.depth * t.size}, "
                         f"{t.threads * t.threads}):")
        first, second = (f"{e} // {t.depth}", f"{e} % {t.depth}") if n.along_k else \
            (f"{e} % {t.size}", f"{e} // {t.size}")
        self.emit(depth + 1, f"{d} = {first}")
        self.emit(depth + 1, f"{kk} = {second}")
        self.emit(depth + 1, f"if {origin} + {d} < {_count(axes)} and {tn.k0} + {kk} < "
                             f"{_count(k_axes)}:")
        self.unflatten(depth + 2, f"({origin} + {d})", axes)
        self.unflatten(depth + 2, f"({tn.k0} + {kk})", k_axes)
        self.emit(depth + 2, f"{sh}[{kk}, {d}] = {top(self.expr(factor, {}))}")
        self.emit(depth + 1, "else:")
        self.emit(depth + 2, f"{sh}[{kk}, {d}] = np.{factor.dtype}(0.0)")

    def products_node(self, n: Products, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        tn, t, name = self.tn, self.tn.t, st.name
        self.emit(depth, "cuda.syncthreads()")
        kk = self.names.fresh(f"{name}_kk")
        self.emit(depth, f"for {kk} in range({t.depth}):")
        av = [self.names.fresh(f"{name}_av") for _ in range(t.reg)]
        bv = [self.names.fresh(f"{name}_bv") for _ in range(t.reg)]
        for r in range(t.reg):
            self.emit(depth + 1, f"{av[r]} = {tn.sh[0]}[{kk}, {tn.ty} + {r * t.threads}]")
            self.emit(depth + 1, f"{bv[r]} = {tn.sh[1]}[{kk}, {tn.tx} + {r * t.threads}]")
        for r, c in tn.chain:
            self.emit(depth + 1, f"{tn.chain[r, c]} += {av[r]} * {bv[c]}")
        self.emit(depth, "cuda.syncthreads()")
        if tn.wide:
            for rc in tn.chain:
                self.emit(depth, f"{tn.acc[rc]} += {tn.chain[rc]}")

    def tile_stores_node(self, n: TileStores, depth: int, st: Stage, env: dict[Expr, str]
                         ) -> None:
        tn, t, f = self.tn, self.tn.t, self.tn.f
        m_axes, n_axes = f.axes(Role.M), f.axes(Role.N)
        for r, c in tn.acc:
            m, col = f"{tn.m0} + {tn.ty} + {r * t.threads}", f"{tn.n0} + {tn.tx} + {c * t.threads}"
            self.emit(depth, f"if {m} < {_count(m_axes)} and {col} < {_count(n_axes)}:")
            self.unflatten(depth + 1, f"({m})", m_axes)
            self.unflatten(depth + 1, f"({col})", n_axes)
            value = f"np.{f.body.dtype}({tn.acc[r, c]})" if tn.wide else tn.acc[r, c]
            self.emit(depth + 1, f"{self.index(st.tensors[0], [self.axis(a) for a in st.axes])} "  # type: ignore[union-attr]
                                 f"= {value}")

    # -- scatter stages ----------------------------------------------------------------------
    def scatter(self, st: ScatterStage) -> str:
        how = st.cuda.strategy  # type: ignore[union-attr]
        self.emit(1, f"# stage {st.name}: scatter-add, {how}")
        nodes = stage_nodes(st)
        self.nodes(1, nodes, st, {})
        return self.grid_launch(nodes[0])

    def adds_node(self, n: Adds, depth: int, st: ScatterStage, env: dict[Expr, str]) -> None:
        """Each update's `+=`: an atomic add where points may collide (`n.atomic`)."""
        for d, idx, value in self.scatter_updates(depth, st, {}, env):
            if n.atomic:
                index = idx[0] if len(idx) == 1 else f"({', '.join(idx) or '0'})"
                self.emit(d, self.r.atomic_add.format(array=self.tensor(st.tensor), index=index,
                                                      value=value))
            else:
                self.emit(d, self.r.scatter_add.format(target=self.index(st.tensor, idx), value=value))

def t_shape(st: ComputeStage | ScatterStage) -> list[Expr]:
    return list(st.shape) if isinstance(st, ScatterStage) else [a.extent for a in st.axes]


def _reads(st: ComputeStage | ScatterStage) -> list:
    """Tensors read by the stage (also inside reduction and scatter-domain bounds), in order of
    first appearance."""
    exprs = list(st.bodies) if isinstance(st, ComputeStage) else [e for u in st.updates for e in u.exprs]
    out: list = []
    todo = exprs + [b for a in st.order for b in (a.lo, a.extent)] if isinstance(st, ScatterStage) else exprs
    seen: set[int] = set()
    while todo:
        e = todo.pop(0)
        for x in walk(e):
            if isinstance(x, Read):
                out.append(x.tensor)
            elif isinstance(x, Reduce):
                for a in x.axis:
                    if id(a) not in seen:
                        seen.add(id(a))
                        todo += [a.lo, a.extent]
    return out


def _unique(ts: Sequence) -> list:
    out: list = []
    for t in ts:
        if all(t is not u for u in out):
            out.append(t)
    return out


@dataclass
class _TileNames:
    """A TILE kernel's form and tile shape, and its locals: the two shared slices, the thread's
    index (its column and row in the block), the tile, the slice's first term, the tile's
    accumulators (`chain`: a wide sum's float32 ones for a slice; else `acc`) and origin."""

    f: SumOfProduct
    t: Tile
    sh: list[str]
    tid: str
    tx: str
    ty: str
    tile: str
    k0: str
    acc: dict[tuple[int, int], str]
    chain: dict[tuple[int, int], str]
    m0: str = ""
    n0: str = ""

    @property
    def wide(self) -> bool:
        return self.chain is not self.acc

    @property
    def counts(self) -> tuple[int, int, int]:
        return tile_counts(self.f, self.t.size)


def _count(axes: Sequence[IterVar]) -> int:
    """The static number of points of `axes` (1 for none)."""
    return math.prod(const_int(a.extent) or 1 for a in axes)


_CudaRender.NODE_RULES = {**RenderPass.NODE_RULES, Grid: _CudaRender.grid_node,
                          Single: _CudaRender.single_node, Adds: _CudaRender.adds_node,
                          BlockShared: _CudaRender.block_shared_node,
                          BlockPoints: _CudaRender.block_points_node,
                          BlockFold: _CudaRender.block_fold_node,
                          FirstThread: _CudaRender.first_thread_node,
                          Tiles: _CudaRender.tiles_node, Slices: _CudaRender.slices_node,
                          StageSlice: _CudaRender.stage_slice_node,
                          Products: _CudaRender.products_node, TileStores: _CudaRender.tile_stores_node}
