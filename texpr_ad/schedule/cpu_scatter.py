"""CPU strategies of a scatter stage (refine step 8): how its target is zeroed, whether its
parallel axis runs in blocks, and what its updates share computed once per point (`CpuStagePlan.
zero`, `.block`, `.block_indices`, `.shared`: nodes of its loop tree, stageloops.scatter_loops)."""
from __future__ import annotations

from collections import Counter

from ..te.expr import Call, Const, Expr, Read, always, is_zero
from ..te.ops import Op
from ..te.tensor import Tensor
from ..te.visit import children, walk
from .cpu_invariants import FRESH_BYTES, nbytes, safe_reads
from .nest import const_int
from .plan import ScatterStage, Zeroing
from .plan import with_cpu as _cpu

SCATTER_BLOCK = 64  # values of a scatter's parallel axis per prange iteration (when it is last)
SCATTER_GATHER_BLOCK = 256  # ... the most of them where its target rows are gathered (1 KiB)
CACHE_LINE_F32 = 16  # float32 values in a 64-byte cache line: the smallest scatter block


def zeroing(st: ScatterStage, outputs: tuple[Tensor, ...]) -> ScatterStage:
    """How a scatter zeroes its target: an output of FRESH_BYTES or more is np.zeros from the
    caller (untouched fresh pages cost nothing: an embedding gradient, 50000 x 256, 69 -> 10-19
    ms); a parallel scatter in parallel, each prange iteration its own slice where the slices
    are whole sub-arrays that cover it (first touched by their writer), else in chunks."""
    if any(t is st.tensor for t in outputs) and nbytes(st.tensor, 0) >= FRESH_BYTES:
        return _cpu(st, zero=Zeroing.FRESH)
    p, blocked = st.parallel_axis, st.cpu.block
    if p is None or not st.shape:
        return st
    own = not blocked and is_zero(p.lo) and st.parallel_dim != len(st.shape) - 1 \
        and (e := const_int(p.extent)) is not None and e == const_int(st.shape[st.parallel_dim])
    return _cpu(st, zero=Zeroing.OWN_SLICES if own else Zeroing.CHUNKS)


def scatter_block(st: ScatterStage) -> ScatterStage:
    """Block the parallel axis of a scatter when it is the target's last (contiguous) dim: the
    prange runs over blocks of it, the other loops inside, the block innermost (race-free:
    blocks write disjoint elements).  Blocks of SCATTER_BLOCK values, or of one cache line
    (CACHE_LINE_F32) where the axis is shorter than two of those: with the axis outermost,
    every iteration would stride through the whole target (segment_sum's backward: 64 columns
    of 65536 rows, 15.5 -> 3 ms).  Where the target rows are gathered (`dw[idx[n, r], k]`),
    each block walks every index again and misses on each of its rows again: blocks are whole
    rows of up to SCATTER_GATHER_BLOCK values (embedding_bag's backward, a 30000 x 128 table,
    4096 x 16 indices, one thread: 10.3 -> 8.0 ms; by hand, 512 wide: 30 -> 21 ms in blocks
    of 256), at the cost of parallelism over blocks."""
    p = st.parallel_axis
    n = (const_int(p.extent) or 0) if p is not None else 0
    if (p is None or st.parallel_dim != len(st.shape) - 1 or len(st.order) < 2
            or not is_zero(p.lo) or n < (1 if st.gathers_rows else 2 * CACHE_LINE_F32)):
        return st
    hoisted = dict.fromkeys(i for u in st.updates if always(u.condition) for d, i in
                            enumerate(u.index) if d != st.parallel_dim and p not in walk(i)
                            and not isinstance(i, Const))  # (a condition may guard the index)
    block = min(n, SCATTER_GATHER_BLOCK) if st.gathers_rows else \
        SCATTER_BLOCK if n >= 2 * SCATTER_BLOCK else CACHE_LINE_F32
    return _cpu(st, block=block, block_indices=tuple(hoisted))


def shared_values(st: ScatterStage) -> ScatterStage:
    """What every update of a scatter computes from the same loads at a point, computed once
    per point before the first update (`shared`): each update stores, and past a store LLVM
    loads the tensors again (the target might alias them) and computes it all again.  Grid
    sampling's four taps each recomputed floor(grid[b, i, j, 1] ...) and the bilinear weights
    in their bounds tests, indices and values (input gradient, 1 thread: 7.7 -> 4.2 ms).
    Taken: the largest values used by every update that read a tensor, at indices read from
    no tensor, and are either evaluated at every point by every update anyway (not behind a
    condition, in a select's branch or right of `and`/`or`) or float arithmetic whose reads
    are proven in bounds (cpu_invariants.safe_reads): a coordinate, a weight.  Loads and
    integer index arithmetic behind conditions stay there (max_pool's backward, whose two
    updates are alternatives rarely taken: hoisting its shared loads made it 3.3 -> 4.9 ms).
    Not for blocked scatters (their `block_indices` are computed before the block loop)."""
    if st.cpu.block or len(st.updates) < 2:
        return st
    every = len(st.updates)
    count = Counter(x for u in st.updates for x in {y for e in u.exprs for y in walk(e)})
    free = [_unguarded(u.condition, {*u.index, u.value} if always(u.condition) else set())
            for u in st.updates]
    everywhere = set.intersection(*free)  # evaluated at every point by every update
    found: dict[Expr, None] = {}
    stack = [e for u in reversed(st.updates) for e in reversed((u.condition, *u.index, u.value))]
    while stack:  # preorder: the largest such values
        e = stack.pop()
        if count[e] == every and isinstance(e, (Read, Call)) and _plain_reads(e) and (
                e in everywhere or (_float_math(e) and safe_reads(e))):
            found.setdefault(e, None)
        else:
            stack.extend(reversed(children(e)))
    if not found:
        return st
    return _cpu(st, shared=tuple(sorted(found, key=lambda e: sum(1 for _ in walk(e)))))


def _unguarded(cond: Expr, more: set[Expr]) -> set[Expr]:
    """The nodes of `cond` (and of `more`) evaluated wherever it is: not in a select's branch
    nor on the right of `&`/`|` (the renderer's `and`/`or` skip it)."""
    out: set[Expr] = set()
    stack = [cond, *more]
    while stack:
        e = stack.pop()
        out.add(e)
        lazy = isinstance(e, Call) and e.op in (Op.SELECT, Op.AND, Op.OR)
        stack.extend(children(e)[:1] if lazy else children(e))
    return out


def _float_math(e: Expr) -> bool:
    """`e` computes in floating point (a coordinate, a weight), not only loads, compares and
    integer index arithmetic."""
    return isinstance(e, Call) and any(isinstance(x, Call) and x.dtype.startswith("float")
                                       for x in walk(e))


def _plain_reads(e: Expr) -> bool:
    """`e` reads a tensor, and only at indices that read none (a gathered value stays put)."""
    reads = [x for x in walk(e) if isinstance(x, Read)]
    return bool(reads) and not any(isinstance(y, Read) for r in reads for i in r.indices
                                   for y in walk(i))
