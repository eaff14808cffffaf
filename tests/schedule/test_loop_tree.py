"""The plan's loop tree (schedule/stageloops.py, schedule/lower.py): what each refine decision
lowers to, that `print(plan)` shows it, and that the CPU renderer prints that tree (the loops in
the source are the tree's).  Values against NumPy; no timing."""
from __future__ import annotations

import re
import typing

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels.cpu_render import NODE_RULES
from texpr_ad.ops import elementwise as ew
from texpr_ad.schedule import lower, stageloops
from texpr_ad.schedule.lower import (Alloc, ChunkFold, Combine, In, Member, Partials, RowFold,
                                     Shared, Together, kernel_nodes)
from texpr_ad.schedule.stageloops import (Adds, Bind, Block, Blocks, Fold, For, Hoist, Indices,
                                          Store, Zero, stage_loops)


def _in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for p in parts:
        at = text.find(p, at)
        if at < 0:
            return False
    return True


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(getattr(n, "body", ()))


def test_every_node_kind_has_a_render_rule_and_a_printed_line():
    kinds = set(typing.get_args(stageloops.SNode)) | set(typing.get_args(lower.KNode))
    assert kinds - set(NODE_RULES) == set()
    assert kinds - set(lower.KERNEL_LINES) == set()


def test_a_reshape_split_lowers_to_two_loops_and_the_axis_rebuilt():
    x = te.placeholder((32, 4, 64), "float32", name="x")
    y = te.compute((32, 256), lambda i, a: x[i, a // 64, a % 64] * 2.0, name="y")
    k = ta.build([y], [x])
    (hi,) = [n for n in _walk(stage_loops(k.plan.stage("y"))) if isinstance(n, For) and n.why]
    lo = hi.body[0]
    assert isinstance(lo, For) and isinstance(lo.body[0], Bind) and lo.body[0].split.factor == 64
    assert "split: a = 64 * a_hi + a_lo" in str(k.plan)
    assert re.search(r"for a_hi in range\(4\):\n +for a_lo in range\(64\):\n +a = 64 \* a_hi "
                     r"\+ a_lo", k.source), k.source
    xs = np.random.default_rng(0).standard_normal((32, 4, 64)).astype(np.float32)
    np.testing.assert_array_equal(k(xs)[0], xs.reshape(32, 256) * 2)


def test_softmax_lowers_to_one_prange_whose_exp_row_folds_its_sum():
    x = te.placeholder((512, 1024), "float32", name="x")
    k = ta.build([ew.softmax(x)], [x])
    (node,) = k.plan.tree
    nodes = kernel_nodes(k.plan, node)
    assert [type(n) for n in nodes] == [Alloc] * 4 + [Shared]
    assert [a.row_buffer for a in nodes[:4]] == [False, True, False, False]
    members = nodes[-1].body
    assert all(isinstance(m, Member) for m in members) and len(members) == 3
    (together,) = members[1].body
    assert isinstance(together, Together) and together.loop.kind == "row"
    (row,) = [n for n in _walk(together.body) if isinstance(n, RowFold)]
    assert row.store.tensor.name == "softmax_exp" and row.group[0].combiner.kind == "sum"
    assert {n.env_of for n in together.body if isinstance(n, In)} == {"", "softmax_exp"}
    assert isinstance(members[2].body[0], Hoist) and members[2].body[0].reciprocals
    assert _in_order(str(k.plan), [
        "prange(512)", "softmax_max_red1", "fold max over k", "row(1024)",
        "for i1 in its row: store softmax_exp and fold sum over i1", "\n    softmax\n",
        "reciprocal: float32 division by softmax_expsum[i0]", "store softmax[i0, i1]"]), k.plan
    # the source's loops are the tree's: the prange, the max's k, the row loop (the exp stored
    # and summed in it) and the norm's loop
    loops = re.findall(r"\n +for \w+ in (p?range)\((\d+)\)", k.source)
    assert loops == [("prange", "512"), ("range", "1024"), ("range", "1024"), ("range", "1024")], \
        k.source
    xs = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(k(xs)[0], e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_a_blocked_scatter_lowers_to_blocks_with_its_row_index_bound_before_the_block():
    x = te.placeholder((300, 64), "float32", name="x")
    off = te.placeholder((11,), "int64", name="offsets")

    def body(s, k):
        r = te.reduce_axis((off[s], off[s + 1]), "r")
        return te.sum(x[r, k], axis=r)
    y = te.compute((10, 64), body, name="seg")
    h = te.placeholder((10, 64), "float32", name="head")
    (dx,) = ta.grad(y, [x], head=h)
    k = ta.build([dx], [x, off, h])
    nodes = kernel_nodes(k.plan, k.plan.tree[-1])[1].body  # (Alloc, Scope)
    assert isinstance(nodes[0], Zero) and isinstance(nodes[1], Blocks) and nodes[1].size == 16
    kinds = [type(n) for n in _walk(nodes[1].body)]
    assert kinds.index(Indices) < kinds.index(Block) < kinds.index(Adds), kinds
    assert _in_order(str(k.plan), ["prange(blocks of 16 k)", "hoisted: r (loop-invariant",
                                    "for k in its block"]), k.plan
    rng = np.random.default_rng(3)
    hs = rng.standard_normal((10, 64)).astype(np.float32)
    offs = np.concatenate([[0], np.sort(rng.integers(0, 300, 9)), [300]]).astype(np.int64)
    want = np.zeros((300, 64), np.float32)
    for s in range(10):
        want[offs[s]:offs[s + 1]] += hs[s]
    np.testing.assert_array_equal(k(rng.standard_normal((300, 64)).astype(np.float32), offs,
                                    hs)[0], want)


def test_the_tree_before_refinement_is_each_stage_in_its_own_prange():
    from texpr_ad.schedule.planner import plan_stages
    x = te.placeholder((64, 128), "float32", name="x")
    plan = plan_stages([ew.softmax(x)], [x])  # target-neutral: no loop shared yet
    trees = [stage_loops(s) for s in plan.stages]
    assert all(isinstance(t[0], stageloops.Par) for t in trees)
    assert sum(isinstance(n, Fold) for t in trees for n in _walk(t)) == 2  # max and sum
    assert sum(isinstance(n, Store) for t in trees for n in _walk(t)) == len(plan.stages)
    assert "prange(i0): the leading axes" in str(plan)


def test_split_column_sums_lower_to_partials_a_chunk_prange_and_their_combine():
    x = te.placeholder((80_000, 32), "float32", name="x")
    k = te.reduce_axis((0, 80_000), name="k")
    k_ = ta.build([te.compute((32,), lambda j: te.sum(x[k, j], axis=k), name="y")], [x])
    (node,) = k_.plan.tree
    kinds = [type(n) for n in _walk(kernel_nodes(k_.plan, node))]
    assert kinds.index(Partials) < kinds.index(ChunkFold) < kinds.index(Combine), kinds
    (par,) = [n for n in _walk(kernel_nodes(k_.plan, node)) if isinstance(n, stageloops.Par)
              and n.chunks]
    assert par.chunks == 16 and par.axes[0].name == "k"
    assert _in_order(str(k_.plan), ["partial results of y: 16 each", "prange(16 chunks of k)",
                                    "fold the chunk's terms into y's partial results",
                                    "y: its partial results combined in chunk order"]), k_.plan
    assert re.search(r"for y_c in prange\(16\):", k_.source), k_.source
    xs = np.random.default_rng(2).standard_normal((80_000, 32)).astype(np.float32)
    np.testing.assert_allclose(k_(xs)[0], xs.astype(np.float64).sum(0), rtol=1e-5, atol=1e-3)


def test_a_cuda_plan_lowers_each_stage_to_its_kernel_tree():
    from texpr_ad.kernels.backends import backend
    from texpr_ad.schedule import cuda
    from texpr_ad.schedule.planner import plan_stages
    x = te.placeholder((64, 128), "float32", name="x")
    plan = backend("cuda").refine(plan_stages([ew.softmax(x)], [x]), None)
    trees = [cuda.stage_nodes(s) for s in plan.stages]
    assert all(isinstance(t[0], cuda.Grid) for t in trees), trees
    assert sum(isinstance(n, Fold) for t in trees for n in _walk(t)) == 2
    assert _in_order(str(plan), ["kernels (one per stage", "k_softmax_max_red1",
                                 "grid-stride over i0: one thread per point", "fold max over k",
                                 "store softmax_max_red1[i0]"]), plan
    src = backend("cuda").renderer().render(plan)
    assert src.count("in range(cuda.grid(1), ") == len(plan.stages), src


def test_a_cuda_block_reduction_lowers_to_blocks_folds_and_thread_zero():
    """Column sums of a tall matrix: few points over long reductions, each split over blocks;
    the first kernel's folds write partials, the second's combine them and thread 0 stores.
    (Values: tests/cuda/sim_features.py, split_block_reductions, under the simulator.)"""
    from texpr_ad.kernels.backends import backend
    from texpr_ad.kernels.cuda_render import _CudaRender
    from texpr_ad.schedule import cuda
    from texpr_ad.schedule.planner import plan_stages
    x = te.placeholder((65536, 4), "float32", name="x")
    k = te.reduce_axis((0, 65536), name="k")
    y = te.compute((4,), lambda j: te.sum(x[k, j], axis=k), name="y")
    plan = backend("cuda").refine(plan_stages([y], [x]), None)
    (st,) = plan.stages
    assert st.cuda.strategy is cuda.CudaStrategy.BLOCK and st.cuda.split > 1, plan
    part, main = cuda.stage_nodes(st, partial=True), cuda.stage_nodes(st)
    assert [type(n) for n in _walk(part)] == [cuda.BlockShared, cuda.BlockPoints, cuda.BlockFold]
    assert [type(n) for n in _walk(main)] == [cuda.BlockShared, cuda.BlockPoints, cuda.BlockFold,
                                              cuda.FirstThread, Store]
    assert part[1].body[0].partial and main[1].body[0].from_parts
    assert set(cuda.KERNEL_LINES) | set(stageloops.LINES) >= set(_CudaRender.NODE_RULES)
    assert _in_order(str(plan), ["k_y_part", "one per point of j and chunk", "fold sum over k",
                                 "thread 0 writes the chunk's partial", "k_y",
                                 f"the point's {st.cuda.split} partials", "thread 0 of the block",
                                 "store y[j]"]), plan
    src = backend("cuda").renderer().render(plan)
    assert _in_order(src, ["def k_y_part(", "cuda.shared.array(256", "cuda.syncthreads()",
                           "def k_y(", "cuda.shared.array(256", "== 0:", "y[j] = "]), src


def test_a_cuda_tiled_contraction_lowers_to_tiles_slices_and_stores():
    """A large matmul runs as shared-memory tiles; its tree is the tile loop, the K slices (both
    operands staged, then the register products) and the stores, and the kernel prints it.
    (Values: tests/cuda/test_cuda.py, tiled contractions, under the simulator.)"""
    from texpr_ad.kernels.backends import backend
    from texpr_ad.schedule import cuda
    from texpr_ad.schedule.planner import plan_stages
    a = te.placeholder((1024, 512), "float32", name="a")
    b = te.placeholder((512, 1024), "float32", name="b")
    k = te.reduce_axis((0, 512), name="k")
    y = te.compute((1024, 1024), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="y")
    plan = backend("cuda").refine(plan_stages([y], [a, b]), None)
    (st,) = plan.stages
    assert st.cuda.strategy is cuda.CudaStrategy.TILE, plan
    nodes = list(_walk(cuda.stage_nodes(st)))
    assert [type(n) for n in nodes] == [cuda.Tiles, cuda.Slices, cuda.StageSlice, cuda.StageSlice,
                                        cuda.Products, cuda.TileStores]
    assert [n.along_k for n in nodes if isinstance(n, cuda.StageSlice)] == [True, False]
    t = st.cuda.tile
    assert _in_order(str(plan), [f"grid-stride over tiles of {t.size} x {t.size} outputs of i x j",
                                 f"for k in slices of {t.depth} terms", "stage A's slice",
                                 "along K", "stage B's slice", "along N", "steps its accumulators",
                                 "store each thread's outputs"]), plan
    src = backend("cuda").renderer().render(plan)
    assert _in_order(src, [f"cuda.shared.array(({t.depth}, {t.size + 1}), np.float32)",
                           "for y_tile in range(cuda.blockIdx.x, ", "for y_k0 in range(0, 512, ",
                           "cuda.syncthreads()", "y_acc00 += ",
                           "cuda.syncthreads()", "y[i, j] = "]), src
