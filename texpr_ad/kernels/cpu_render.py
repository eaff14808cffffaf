"""The CPU renderer's own plan features: stages joined into one `prange` (with row
buffers), reduction lanes, BLAS contractions in object mode, and row accumulation /
split partial sums.  The planner decides them (schedule/cpu.py); this spells them out."""
from __future__ import annotations

from typing import Callable, Sequence

from ..schedule.plan import ComputeStage
from ..te.expr import Const, Expr, IterVar, Reduce
from .render import _describe, _is_zero, _reduce_groups, _Render, top


class CPURender(_Render):
    """One CPU rendering pass: `_Render` plus the CPU-only stage strategies."""

    def joined(self, group: list[ComputeStage]) -> None:
        """Stages sharing one prange over their (equal) first parallel axis, in order."""
        for st in group:
            self.scope = st.name
            self.emit(1, f"# stage {st.name}: {_describe(st)}")
            if st.cpu.row_buffer:  # type: ignore[union-attr]
                d = st.axes.index(st.order[0])
                self.row_dim.update({id(t): d for t in st.tensors if t is not None})
            else:
                self.allocate(1, st, st.axes)
        head = group[0]
        var = self.names.fresh(f"{head.name}_p")
        self.parallel_head(1, var, top(self.expr(head.order[0].extent, {})))
        for st in group:
            self.scope = st.name
            if st.cpu.row_buffer:  # type: ignore[union-attr]
                self.allocate(2, st, [a for a in st.axes if a is not st.order[0]])
            self.emit(2, f"{self.axis(st.order[0])} = {var}  # stage {st.name}")
            self.loops_and_body(st, 2, st.order[1:])

    def lane_reduction(self, depth: int, groups: list[Reduce], env: dict[Expr, str], stage: str,
                       lanes: int) -> None:
        """A single-valued reduction whose innermost loop folds into `lanes` accumulators.

        The accumulators are a small array updated by an inner `for lane in range(lanes)`
        loop: every lane is its own memory slot, so LLVM vectorizes that loop without
        reassociating anything (scalar accumulators defeat it once the body holds a call
        such as exp_f32).  Lanes combine pairwise at the end.
        """
        r = groups[0]
        comb = r.combiner
        ident = top(self.expr(comb.identity[0], {}))
        acc, lane = self.names.fresh(f"{stage}_lanes"), self.names.fresh("lane")
        self.emit(depth, f"{acc} = np.full({lanes}, {ident}, dtype=np.{r.dtype})")
        d = depth
        for ax in r.axis[:-1]:
            self.range_loop(d, ax, env)
            d += 1
        k = r.axis[-1]
        lo, ext = int(k.lo.value), int(k.extent.value)  # type: ignore[attr-defined]
        main = ext - ext % lanes
        kk = self.names.fresh(f"{self.axis(k)}_u")
        self.emit(d, f"for {kk} in range({lo}, {lo + main}, {lanes}):")
        self.emit(d + 1, f"for {lane} in range({lanes}):")
        slot = f"{acc}[{lane}]"
        src = self.expr(r.source[0], {**env, k: f"({kk} + {lane})"})
        self.combine(d + 2, comb, [slot], [src], [slot], stage)
        if main < ext:
            self.emit(d, f"for {self.axis(k)} in range({lo + main}, {lo + ext}):")
            self.combine(d + 1, comb, [f"{acc}[0]"], [self.expr(r.source[0], env)], [f"{acc}[0]"], stage)
        level = [f"{acc}[{u}]" for u in range(lanes)]
        while len(level) > 1:  # pairwise: ((a0 + a1) + (a2 + a3)) + ...
            for p in range(0, len(level), 2):
                self.combine(depth, comb, [level[p]], [level[p + 1]], [level[p]], stage)
            level = level[::2]
        if r.init:
            self.combine(depth, comb, [self.expr(r.init[0], env)], [level[0]], [level[0]], stage)
        out = self.names.fresh(f"{stage}_acc")
        self.emit(depth, f"{out} = {level[0]}")
        for g in groups:
            env[g] = out

    def contraction(self, st: ComputeStage) -> None:
        """`np.matmul` on permuted/reshaped views, in object mode (BLAS through NumPy)."""
        c = st.cpu.contraction  # type: ignore[union-attr]
        assert c is not None
        out = self.tensor(st.tensors[0])  # type: ignore[arg-type]
        bs, ms, ks, ns = (top(self.expr(x, {})) for x in c.sizes)
        self.emit(1, "with objmode():")
        ops = []
        for t, perm, shp in ((c.a, c.a_perm, (bs, ms, ks)), (c.b, c.b_perm, (bs, ks, ns))):
            v = self.names.fresh(f"{st.name}_{'a' if not ops else 'b'}")
            src = self.tensor(t) if t.ndim else f"{self.tensor(t)}.reshape(())"
            if perm != tuple(range(len(perm))):
                src = f"{src}.transpose({perm!r})"
            self.emit(2, f"{v} = {src}.reshape(({', '.join(shp)}))")
            ops.append(v)
        res = self.names.fresh(f"{st.name}_c")
        if c.out_perm is None:
            self.emit(2, f"{res} = {out}.reshape(({bs}, {ms}, {ns}))")
        else:
            self.emit(2, f"{res} = np.empty(({bs}, {ms}, {ns}), dtype={out}.dtype)")
        # one BLAS call per batch entry or row block (NumPy's stacked matmul may not reach BLAS)
        self.emit(2, f"blas_matmul({ops[0]}, {ops[1]}, {res})")
        if c.out_perm is not None:
            self.emit(2, f"{out}[...] = {res}.reshape({self.shape(c.bmn_shape)})"
                         f".transpose({c.out_perm!r})")

    def accumulate(self, st: ComputeStage) -> None:
        """Row accumulation (reduction loops outside the row axis) and/or split partial results."""
        acc_plan = st.cpu.accumulate  # type: ignore[union-attr]
        assert acc_plan is not None
        red = _reduce_groups(st.bodies)[0]
        r = red[0]
        comb = r.combiner
        dtype = r.dtype if r.dtype != "bool" else "bool_"
        ident = top(self.expr(comb.identity[0], {}))
        row, split = acc_plan.row, acc_plan.split
        idx = [self.axis(a) for a in st.axes]
        outer = [a for a in st.order if a is not row]

        def fold(depth: int, acc_at: Callable[[], str], axes: Sequence[IterVar]) -> None:
            """acc = combine(acc, source) over `axes` (then the row axis, if any, innermost)."""
            d = depth
            for ax in axes:
                self.range_loop(d, ax, {})
                d += 1
            if row is not None:
                self.range_loop(d, row, {})
                d += 1
            if not (isinstance(r.condition, Const) and r.condition.value is True):
                self.emit(d, f"if {top(self.expr(r.condition, {}))}:")
                d += 1
            a = acc_at()
            self.combine(d, comb, [a], [self.expr(r.source[0], {})], [a], st.name)

        def finish(depth: int, acc: str) -> None:
            """Apply init and store every body with the reduction replaced by `acc`."""
            if r.init:
                self.combine(depth, comb, [self.expr(r.init[0], {})], [acc], [acc], st.name)
            env: dict[Expr, str] = {g: acc for g in red}
            for t, b in zip(st.tensors, st.bodies, strict=True):
                if t is not None:
                    self.emit(depth, f"{self.index(t, idx)} = {top(self.expr(b, env))}")

        if split is None:  # row accumulation in a local array, prange over the outer axes
            depth, serial = 1, outer
            if st.parallel and st.fused:
                depth = self.parallel_nest(depth, st.order[: st.fused], st.name)
                serial = outer[st.fused:]
            for a in serial:
                self.range_loop(depth, a, {})
                depth += 1
            acc = self.names.fresh(f"{st.name}_row")
            self.emit(depth, f"{acc} = np.empty({top(self.expr(row.extent, {}))}, dtype=np.{dtype})")  # type: ignore[union-attr]
            self.range_loop(depth, row, {})  # type: ignore[arg-type]
            self.emit(depth + 1, f"{acc}[{self.axis(row)}] = {ident}")  # type: ignore[arg-type]
            fold(depth, lambda: f"{acc}[{self.axis(row)}]", r.axis)  # type: ignore[arg-type]
            self.range_loop(depth, row, {})  # type: ignore[arg-type]
            v = self.names.fresh(f"{st.name}_acc")
            self.emit(depth + 1, f"{v} = {acc}[{self.axis(row)}]")  # type: ignore[arg-type]
            finish(depth + 1, v)
            return
        # split: partial results part[c, *axes], one prange iteration per chunk
        n = int(split.extent.value)  # type: ignore[attr-defined]
        chunks = acc_plan.chunks
        size = -(-n // chunks)
        part = self.names.fresh(f"{st.name}_part")
        pshape = [top(self.expr(a.extent, {})) for a in st.axes]
        self.emit(1, f"{part} = np.empty(({chunks}, {', '.join(pshape)}), dtype=np.{dtype})")
        c = self.names.fresh(f"{st.name}_c")
        self.parallel_head(1, c, str(chunks))
        depth = 2
        for a in (o for o in st.order if o is not row):
            self.range_loop(depth, a, {})
            depth += 1
        at = f"{part}[{', '.join([c, *idx])}]"
        if row is not None:
            self.range_loop(depth, row, {})
            self.emit(depth + 1, f"{at} = {ident}")
        else:
            self.emit(depth, f"{at} = {ident}")
        s = self.axis(split)
        lo = self.expr(split.lo, {})
        base = f"{lo} + " if not _is_zero(split.lo) else ""
        self.emit(depth, f"for {s} in range({base}{c} * {size}, {base}min({c} * {size} + {size}, {n})):")
        fold(depth + 1, lambda: at, r.axis[1:])
        # combine the partial results
        depth = 1
        if st.order:
            depth = self.parallel_nest(1, st.order[:1], st.name)
            for a in st.order[1:]:
                self.range_loop(depth, a, {})
                depth += 1
        v = self.names.fresh(f"{st.name}_acc")
        self.emit(depth, f"{v} = {part}[{', '.join(['0', *idx])}]")
        k = self.names.fresh(f"{st.name}_k")
        self.emit(depth, f"for {k} in range(1, {chunks}):")
        self.combine(depth + 1, comb, [v], [f"{part}[{', '.join([k, *idx])}]"], [v], st.name)
        finish(depth, v)
