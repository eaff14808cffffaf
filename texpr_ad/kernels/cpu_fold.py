"""The reduction folds of CPU rendering (`CPUFold`, the base of cpu_render's `CPURender`): an
accumulator per reduce axis, float32 blocks of wide sums, row accumulation, split partial sums."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..schedule.plan import SUM_BLOCK, SUM_CHAIN, ComputeStage, wide_sum
from ..te.expr import Const, Expr, IterVar, Read, Reduce, ReduceKind, always, const, is_zero
from ..te.simplify import simplify
from ..te.visit import substitute, walk
from .render import WIDE_ZERO, RenderPass, read_site, reduce_groups, top


class CPUFold(RenderPass):
    """The folds of one CPU rendering pass (`CPURender` adds the loop nests that call them)."""

    rows: dict[str, str]  # a row accumulation's row of accumulators, by stage
    parts: dict[str, str]  # a split sum's array of partial results, by stage
    chunk_of: tuple[str, str, int]  # the split axis's count, chunk size and chunks

    def stepped_fold(self, depth: int, r: Reduce, env: dict[Expr, str], stage: str,
                     chunk: Chunk | None = None,
                     siblings: Sequence[tuple[Reduce, dict[Expr, str], str]] = (),
                     serial: bool = False) -> list[str]:
        """Fold `r`'s source (no init) over its axes in scalar accumulators stepped by
        `LANE_STEP`, one per reduce axis, each folded into the one outside it when its loop
        ends: over (n, h, w) a float32 sum adds chains of n, h and w terms, not n*h*w.
        `chunk` replaces the outermost axis's range (a split chunk's).  A wide sum
        (plan.wide_sum) adds float32 chains of at most SUM_CHAIN terms: the outermost
        accumulator and those of longer loops are float64, a long innermost loop folds in
        float32 blocks (`fold_levels`).  `siblings` (reduction, env, stage) fold over the same
        axes in the same loops, accumulators of their own.  Returns the outermost accumulator
        of `r` and of each sibling (float64 when wide).  `serial`: scalar sums (no lanes,
        fuse.scalar_sibling) step `acc + term` in axis order, as `reduction` would."""
        levels: list[Level] = []
        last, wide = len(r.axis) - 1, wide_sum(r)
        for k, ax in enumerate(r.axis):
            acc = self.names.fresh(f"{stage}_acc")
            long = k == 0 or _longer(ax, SUM_CHAIN)
            levels += self.fold_levels(ax, acc, stage, env, wide and k == last,
                                       chunk if k == 0 else None, wide and long and k < last)
        accs = [[lv.acc for lv in levels]] + [[self.names.fresh(f"{name}_acc") for _ in levels]
                                              for _, _, name in siblings]

        def step(x: Reduce, acc: str, e: dict[Expr, str]) -> Callable[[int], str]:
            if serial:
                return lambda d: f"{acc} + {self.expr(x.source[0], e)}"
            return lambda d: f"{LANE_STEP[x.combiner.kind]}({acc}, {top(self.expr(x.source[0], e))})"
        self.fold_nest(depth, levels, [(x, a, step(x, a[-1], e)) for (x, e, _), a in
                                       zip([(r, env, stage), *siblings], accs, strict=True)])
        return [a[0] for a in accs]

    def fold_levels(self, ax: IterVar, acc: str, stage: str, env: dict[Expr, str], block: bool,
                    chunk: Chunk | None = None, f64: bool = False) -> list[Level]:
        """The loop of `ax` (or `chunk`'s range of it) folding into `acc` (float64 if `f64`);
        when `block` and it is longer than SUM_BLOCK, two levels instead: a loop over blocks
        folding into `acc` (float64) and one over a block of at most SUM_BLOCK terms folding
        into a float32 accumulator of its own (the lanes LLVM vectorizes hold short chains).
        The block index counts from 0 and the chunk's start is clamped at 0, so LLVM sees
        that reads at `ax` are not negative (no wraparound select) and vectorizes the loop."""
        if chunk is None:
            n = int(ax.extent.value) if isinstance(ax.extent, Const) else None
            if not block or (n is not None and n <= SUM_BLOCK):
                return [Level(acc, lambda d: self.range_loop(d, ax, env), f64)]
            lo = self.expr(ax.lo, env)
            start = "" if is_zero(ax.lo) else f"{lo} + "
            count = str(n) if n is not None else f"({top(self.expr(ax.extent, env))})"
        else:
            if not block:
                return [Level(acc, lambda d: self.emit(d, chunk.header(self.axis(ax))), f64)]
            n = None  # the chunk's count of terms, at the call
            start = self.names.fresh(f"{stage}_s0")
            count = self.names.fresh(f"{stage}_n")
        kb, kk = self.names.fresh(f"{stage}_kb"), self.names.fresh(f"{stage}_kk")
        blk = self.names.fresh(f"{stage}_blk")
        # a static count: its full blocks, then the shorter last one (a count LLVM knows)
        nb = f"({count} + {SUM_BLOCK - 1}) // {SUM_BLOCK}" if n is None else n // SUM_BLOCK
        inner = str(SUM_BLOCK) if n is not None else \
            f"min({SUM_BLOCK}, {count} - {kb} * {SUM_BLOCK})"

        def blocks(d: int) -> None:
            if chunk is not None:
                self.emit(d, f"{start} = max({chunk.start()}, 0)")
                self.emit(d, f"{count} = min({chunk.size}, {chunk.n} - {start})")
            self.emit(d, f"for {kb} in range({nb}):")

        def one_block(d: int, size: str = inner, at: str = f"{kb} * {SUM_BLOCK}") -> None:
            self.emit(d, f"for {kk} in range({size}):")
            base = start if chunk is None else f"{chunk.lo}{start} + "
            self.emit(d + 1, f"{self.axis(ax)} = {base}{at} + {kk}")
        tail = None if n is None or not n % SUM_BLOCK else \
            (lambda d: one_block(d, str(n % SUM_BLOCK), str(n - n % SUM_BLOCK)))
        return [Level(acc, blocks, True), Level(blk, one_block, tail=tail)]

    def fold_nest(self, depth: int, levels: list[Level],
                  folds: Sequence[tuple[Reduce, list[str], Callable[[int], str]]]) -> None:
        """Open `levels` (outermost first), each fold's accumulator of that level set to its
        reduction's identity (float64 zero for a float64 level), step each fold's innermost
        accumulator with `inner(depth)` (which may emit statements first), and fold each level
        into the one outside it as its loop ends.  `folds`: (reduction, an accumulator per
        level, inner) for each reduction stepping in these loops."""
        def open_(k: int, d: int, opener: Callable[[int], None]) -> None:
            for r, accs, _ in folds:
                ident = top(self.expr(r.combiner.identity[0], {}))
                self.emit(d, f"{accs[k]} = {WIDE_ZERO if levels[k].f64 else ident}")
            opener(d)

        def steps(d: int) -> None:
            for r, accs, inner in folds:
                self.emit(d, f"{accs[-1]} = {inner(d)}")

        def fold(k: int, d: int) -> None:  # level k's accumulators into level k - 1's
            for r, accs, _ in folds:
                step = LANE_STEP[r.combiner.kind]
                self.emit(d, f"{accs[k - 1]} = {step}({accs[k - 1]}, {accs[k]})")
        for k, lv in enumerate(levels):
            open_(k, depth + k, lv.open)
        steps(depth + len(levels))
        for k in range(len(levels) - 1, 0, -1):
            fold(k, depth + k)
            if (tail := levels[k].tail) is not None:  # the last, shorter block after the blocks
                open_(k, depth + k - 1, tail)
                steps(depth + k)
                fold(k, depth + k - 1)

    def lane_reduction(self, depth: int, groups: list[Reduce], env: dict[Expr, str], stage: str,
                       lanes: int) -> None:
        """A single-valued sum/max/min reduction that LLVM vectorizes into SIMD lanes.

        Scalar accumulators, stepped by `LANE_STEP` (vecmath.py): a sum's adds are marked
        reassociable (only those: the body keeps its order), max/min are llvm.maximum/minimum,
        which vectorize exactly.  An array of lane accumulators stayed scalar code, ~5x slower.
        """
        r = groups[0]
        acc = self.stepped_fold(depth, r, env, stage)[0]
        if wide_sum(r):
            acc = self.narrow(depth, r, acc, stage)
        if r.init:
            self.combine(depth, r.combiner, [self.expr(r.init[0], env)], [acc], [acc], stage)
        for g in groups:
            env[g] = acc

    def row_acc(self, depth: int, st: ComputeStage, row: IterVar) -> None:
        """A local row of accumulators along `row`, each the reduction's identity."""
        dtype, ident = self.acc_type(reduce_groups(st.bodies)[0][0])
        [self.axis(a) for a in st.axes]  # (the axes named first, as the stores name them)
        acc = self.rows[st.name] = self.names.fresh(f"{st.name}_row")
        self.emit(depth, f"{acc} = np.empty({top(self.expr(row.extent, {}))}, dtype=np.{dtype})")
        self.range_loop(depth, row, {})
        self.emit(depth + 1, f"{acc}[{self.axis(row)}] = {ident}")

    def fold_into_row(self, depth: int, st: ComputeStage, row: IterVar) -> None:
        """Every term folded into the row: the reduce loops outside the row loop."""
        r = reduce_groups(st.bodies)[0][0]
        first, at = r.axis[0], f"{self.rows[st.name]}[{self.axis(row)}]"
        lo, ext = top(self.expr(first.lo, {})), top(self.expr(first.extent, {}))
        if not self.fold_rows(depth, first, lo, ext if is_zero(first.lo) else f"{lo} + {ext}",
                              [(st, at)], r.axis[1:], row):
            self.fold(depth, [(st, lambda: at)], r.axis, row)

    def finish_row(self, depth: int, st: ComputeStage) -> None:
        """At a point of the row: its accumulator rounded, then the init and the stores."""
        row = st.cpu.accumulate.row  # type: ignore[union-attr]
        v = self.names.fresh(f"{st.name}_acc")
        at = f"{self.rows[st.name]}[{self.axis(row)}]"  # type: ignore[arg-type]
        self.emit(depth, f"{v} = {self.rounded(reduce_groups(st.bodies)[0][0], at)}")
        self.finish(depth, st, [self.axis(a) for a in st.axes], v)

    def acc_type(self, r: Reduce) -> tuple[str, str]:
        """The NumPy dtype of an array of `r`'s accumulators and their initial value: float64
        and zero for a wide sum (plan.wide_sum)."""
        if wide_sum(r):
            return "float64", WIDE_ZERO
        return (r.dtype if r.dtype != "bool" else "bool_"), top(self.expr(r.combiner.identity[0], {}))

    def rounded(self, r: Reduce, acc: str) -> str:
        """An accumulator of `r` as a value of its dtype (a wide sum's is float64)."""
        return f"np.{r.dtype}({acc})" if wide_sum(r) else acc

    def fold_rows(self, depth: int, ax: IterVar, start: str, stop: str,
                  stages: Sequence[tuple[ComputeStage, str]], axes: Sequence[IterVar],
                  row: IterVar) -> bool:
        """`fold` of `stages` (each with its accumulator row element, indexed by `row`) over
        `ax` from `start` to `stop`, then `axes`, then `row`, where a wide sum's float64 row
        adds a float32 row of its own per `row_block` terms of `ax` (the plan's `Accumulate`):
        the row loop stays a float32 SIMD loop.  False (nothing emitted) where no stage has a
        row block: the caller folds as usual."""
        wide = [(st, at) for st, at in stages if st.cpu.accumulate.row_block]  # type: ignore[union-attr]
        if not wide:
            return False
        per = wide[0][0].cpu.accumulate.row_block  # type: ignore[union-attr]
        j, ext = self.axis(row), top(self.expr(row.extent, {}))
        blk = {id(st): self.names.fresh(f"{st.name}_blk") for st, _ in wide}
        for st, _ in wide:
            r = reduce_groups(st.bodies)[0][0]
            self.emit(depth, f"{blk[id(st)]} = np.empty({ext}, dtype=np.{r.dtype})")
        b = self.names.fresh(f"{stages[0][0].name}_rb")
        self.emit(depth, f"for {b} in range({start}, {stop}, {per}):")
        self.range_loop(depth + 1, row, {})
        for st, _ in wide:
            self.emit(depth + 2, f"{blk[id(st)]}[{j}] = {self._ident(st)}")
        self.emit(depth + 1, f"for {self.axis(ax)} in range({b}, min({b} + {per}, {stop})):")
        self.fold(depth + 2, [(st, lambda at=(f"{blk[id(st)]}[{j}]" if id(st) in blk else at): at)
                              for st, at in stages], axes, row)
        self.range_loop(depth + 1, row, {})
        for st, at in wide:
            self.emit(depth + 2, f"{at} = {at} + {blk[id(st)]}[{j}]")
        return True

    def fold(self, depth: int, stages: Sequence[tuple[ComputeStage, Callable[[], str]]],
             axes: Sequence[IterVar], row: IterVar | None) -> None:
        """acc = combine(acc, source) of each stage (with its accumulator) over `axes`, then the
        row axis, if any, innermost; the stages share these loops (a CHUNKS loop of fuse.py)."""
        d = depth
        reds = [reduce_groups(st.bodies)[0][0] for st, _ in stages]
        unroll = stages[0][0].cpu.accumulate.unroll  # type: ignore[union-attr]
        last = axes[-1] if axes and row is not None and unroll > 1 else None
        for ax in (axes[:-1] if last is not None else axes):
            self.range_loop(d, ax, {})
            d += 1
        if last is not None:  # unrolled: each row element loaded and stored once per `unroll` terms (plan)
            assert row is not None
            groups = IterVar(f"{last.name}_g", const(0, "int64"),
                             simplify(last.extent // unroll), "reduce")
            rest = IterVar(last.name, simplify(last.lo + groups.extent * unroll),
                           simplify(last.extent % unroll), "reduce")
            for loop, at in ((groups, [last.lo + groups * unroll + u for u in range(unroll)]),
                             (rest, [rest])):
                self.range_loop(d, loop, {})
                terms = [[simplify(substitute(r.source[0], {last: k})) for k in at] for r in reds]
                self.bind_indices(d + 1, stages, [x for ts in terms for x in ts], {last: at})
                self.range_loop(d + 1, row, {})
                for (st, acc_at), r, ts in zip(stages, reds, terms, strict=True):
                    a, t = acc_at(), self.names.fresh(f"{st.name}_t")  # a local: no reload
                    self.emit(d + 2, f"{t} = {a}")                   # after each store
                    for src in ts:  # the same terms in the same order as one loop over `last`
                        self.combine(d + 2, r.combiner, [t], [self.expr(src, {})], [t], st.name)
                    self.emit(d + 2, f"{a} = {t}")
                self.bound.clear()
            return
        if row is not None:
            self.bind_indices(d, stages, [r.source[0] for r in reds], {})
            self.range_loop(d, row, {})
            d += 1
        for (st, acc_at), r in zip(stages, reds, strict=True):
            dc = d
            if not always(r.condition):
                self.emit(d, f"if {top(self.expr(r.condition, {}))}:")
                dc += 1
            a = acc_at()
            self.combine(dc, r.combiner, [a], [self.expr(r.source[0], {})], [a], st.name)
        self.bound.clear()

    def bind_indices(self, depth: int, stages: Sequence[tuple[ComputeStage, Callable[[], str]]],
                     terms: Sequence[Expr], sub: dict[IterVar, Sequence[Expr]]) -> None:
        """The plan's indices read from data that the row loop does not change (`Accumulate.
        indices`, with `sub`'s unrolled values), computed and checked into locals before it."""
        plan = [e for st, _ in stages for e in st.cpu.accumulate.indices]  # type: ignore[union-attr]
        want = {simplify(substitute(e, {a: k})) for e in plan for a, ks in sub.items() for k in ks}
        want |= set(plan)
        for x in (x for t in terms for x in walk(t) if isinstance(x, Read)):
            for d, i in enumerate(x.indices):
                if i in want and (key := (x.tensor.name, d, i)) not in self.bound:
                    self.bound[key] = v = self.names.fresh(f"{x.tensor.name}_i{d}")
                    n = f"{self.tensor(x.tensor)}.shape[{d}]"
                    self.emit(depth, f"{v} = {self.check(top(self.expr(i, {})), n, read_site(x, d, self.scope))}")

    def finish(self, depth: int, st: ComputeStage, idx: list[str], acc: str) -> None:
        """Apply init and store every body of `st` with its reduction replaced by `acc`."""
        red = reduce_groups(st.bodies)[0]
        r = red[0]
        if r.init:
            self.combine(depth, r.combiner, [self.expr(r.init[0], {})], [acc], [acc], st.name)
        env: dict[Expr, str] = {g: acc for g in red}
        for t, b in zip(st.tensors, st.bodies, strict=True):
            if t is not None:
                self.emit(depth, f"{self.index(t, idx)} = {top(self.expr(b, env))}")

    def _ident(self, st: ComputeStage) -> str:
        return top(self.expr(reduce_groups(st.bodies)[0][0].combiner.identity[0], {}))

    def partials(self, depth: int, stages: Sequence[ComputeStage], chunks: int) -> None:
        """The split axis's count and chunk size (computed here where symbolic), then each
        stage's array of partial results, one per chunk."""
        st = stages[0]
        split = st.cpu.accumulate.split  # type: ignore[union-attr]
        assert split is not None
        [self.axis(a) for a in st.axes]  # (the axes named first, as the stores name them)
        if isinstance(ext := split.extent, Const):
            n, size = str(ext.value), str(-(-int(ext.value) // chunks))
        else:  # a symbolic extent: the chunk size is computed once at the call
            n, size = self.names.fresh(f"{st.name}_n"), self.names.fresh(f"{st.name}_cs")
            self.emit(depth, f"{n} = {top(self.expr(ext, {}))}")
            self.emit(depth, f"{size} = ({n} + {chunks - 1}) // {chunks}")
        self.chunk_of = (n, size, chunks)
        for s_ in stages:
            part = self.parts[s_.name] = self.names.fresh(f"{s_.name}_part")
            pshape = [str(chunks), *(top(self.expr(a.extent, {})) for a in s_.axes)]
            self.emit(depth, f"{part} = np.empty(({', '.join(pshape)}, ), "
                             f"dtype=np.{self.acc_type(reduce_groups(s_.bodies)[0][0])[0]})")

    def chunk_fold(self, depth: int, stages: Sequence[ComputeStage], riders: Sequence[int],
                   c: str) -> None:
        """In chunk `c`: each stage's terms folded into its partial result (a vector chunk:
        scalar accumulators stepped like lanes; else its row), `riders` (indices of STEPPED
        scalar sums) stepping in the row loop, folded once per row of the chunk."""
        st = stages[0]
        acc_plan = st.cpu.accumulate
        assert acc_plan is not None and acc_plan.split is not None
        r = reduce_groups(st.bodies)[0][0]
        row, split = acc_plan.row, acc_plan.split
        idx = [self.axis(a) for a in st.axes]
        (n, size, _), reds = self.chunk_of, [reduce_groups(s_.bodies)[0][0] for s_ in stages]
        ats = [f"{self.parts[s_.name]}[{', '.join([c, *([] if k in riders else idx)])}]"
               for k, s_ in enumerate(stages)]
        s = self.axis(split)
        lo = self.expr(split.lo, {})
        chunk = Chunk(c, size, n, f"{lo} + " if not is_zero(split.lo) else "")
        if acc_plan.vector:  # scalar accumulators per reduce axis, stepped like lanes
            assert len(stages) == 1
            self.emit(depth, f"{ats[0]} = {self.stepped_fold(depth, r, {}, st.name, chunk)[0]}")
            return
        rows_ = [(s_, at) for k, (s_, at) in enumerate(zip(stages, ats)) if k not in riders]
        if row is not None:
            self.range_loop(depth, row, {})
        for k, (s_, at) in enumerate(zip(stages, ats)):
            if k not in riders:
                self.emit(depth + (row is not None), f"{at} = {self.acc_type(reds[k])[1]}")
        outer = {k: self.names.fresh(f"{stages[k].name}_acc") for k in riders}
        inner = {k: self.names.fresh(f"{stages[k].name}_acc") for k in riders}
        for k in riders:  # a wide rider's outer accumulator is float64
            self.emit(depth, f"{outer[k]} = {self.acc_type(reds[k])[1]}")
        if not (row is not None and self.fold_rows(
                depth, split, f"{chunk.lo}{chunk.start()}",
                f"{chunk.lo}min({chunk.start()} + {size}, {n})", rows_, r.axis[1:], row)):
            self.emit(depth, chunk.header(s))
            for k in riders:  # its row, in float32 lanes, is one block of a wide rider
                self.emit(depth + 1, f"{inner[k]} = {self._ident(stages[k])}")
            self.fold(depth + 1, [(s_, lambda at=at: at) for s_, at in rows_], r.axis[1:], row)
        steps = {k: LANE_STEP[reds[k].combiner.kind] for k in riders}
        for k in riders:  # in the row loop (the last lines fold wrote), then once per row
            self.emit(depth + 2 + len(r.axis[1:]), f"{inner[k]} = {steps[k]}({inner[k]}, "
                                                   f"{top(self.expr(reds[k].source[0], {}))})")
        for k in riders:
            self.emit(depth + 1, f"{outer[k]} = {steps[k]}({outer[k]}, {inner[k]})")
        for k in riders:
            self.emit(depth, f"{ats[k]} = {outer[k]}")

    def combine_parts(self, depth: int, st: ComputeStage) -> None:
        """At a point of `st`: its partial results combined in chunk order, then finished."""
        part, chunks = self.parts[st.name], self.chunk_of[2]
        rs = reduce_groups(st.bodies)[0][0]
        own = [self.axis(a) for a in st.axes]
        v = self.names.fresh(f"{st.name}_acc")
        self.emit(depth, f"{v} = {part}[{', '.join(['0', *own])}]")
        k = self.names.fresh(f"{st.name}_k")
        self.emit(depth, f"for {k} in range(1, {chunks}):")
        self.combine(depth + 1, rs.combiner, [v], [f"{part}[{', '.join([k, *own])}]"], [v], st.name)
        self.finish(depth, st, own, v if not wide_sum(rs) else self.narrow(depth, rs, v, st.name))


@dataclass(frozen=True)
class Level:
    """One loop of a fold: its accumulator, and `open(depth)`, which emits the loop's header
    (and the lines it needs before it, at the same depth, or first inside it); an innermost
    block level of a static count may have a `tail` run once after its blocks' loop."""

    acc: str
    open: Callable[[int], None]
    f64: bool = False
    tail: Callable[[int], None] | None = None  # the last, shorter block's loop (after the blocks)


@dataclass(frozen=True)
class Chunk:
    """Chunk `c` (a prange variable) of a split reduction axis: `size` of its `n` values from
    `lo + c * size` (`lo` is "" or "<lo> + "), the last chunk cut at `n`."""

    c: str
    size: str
    n: str
    lo: str

    def start(self) -> str:
        return f"{self.c} * {self.size}"

    def header(self, var: str) -> str:
        return (f"for {var} in range({self.lo}{self.start()}, "
                f"{self.lo}min({self.start()} + {self.size}, {self.n})):")


def _longer(ax: IterVar, n: int) -> bool:
    """Whether the loop of `ax` may run more than `n` times."""
    return not (isinstance(ax.extent, Const) and int(ax.extent.value) <= n)


# the accumulation step of a lanes reduction, by kind (vecmath.py)
LANE_STEP = {ReduceKind.SUM: "radd", ReduceKind.MAX: "fmaximum", ReduceKind.MIN: "fminimum"}
