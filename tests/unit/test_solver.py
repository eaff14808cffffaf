"""Brute-force tests of the integer index solver (STYLE rule 10).

For each system: enumerate every point of the unknowns' box (respecting the
constraints), group the points by their image, and check that for every
target point in a box around the image the solver's new axes (within their
bounds, where its conditions hold) produce exactly the same preimages, each
once.  The reference is plain enumeration; it shares no code with the solver.
"""
from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict

import pytest

from texpr_ad import te
from texpr_ad.deriv.solver import invert
from texpr_ad.te.expr import Call, Const, Expr, IterVar, Var
from texpr_ad.te.ops import Op

# -- a tiny evaluator, independent of the solver -------------------------------------------------

_BIN = {
    Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
    Op.FLOORDIV: lambda a, b: a // b, Op.FLOORMOD: lambda a, b: a % b,
    Op.MIN: min, Op.MAX: max, Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b,
    Op.GT: lambda a, b: a > b, Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b,
    Op.NE: lambda a, b: a != b, Op.AND: lambda a, b: a and b, Op.OR: lambda a, b: a or b,
}


def ev(e: Expr, env: dict) -> int | bool:
    match e:
        case Const(value=v):
            return v
        case Var() | IterVar():
            return env[e]
        case Call(op=Op.NEG, args=(a,)):
            return -ev(a, env)
        case Call(op=Op.NOT, args=(a,)):
            return not ev(a, env)
        case Call(op=Op.CAST, args=(a,)):
            return ev(a, env)
        case Call(op=Op.SELECT, args=(c, a, b)):
            return ev(a, env) if ev(c, env) else ev(b, env)
        case Call(op=op, args=(a, b)) if op in _BIN:
            return _BIN[op](ev(a, env), ev(b, env))
    raise TypeError(f"cannot evaluate {e}")


def box_points(unknowns, env):
    """All points of the unknowns' domains (a domain may depend on earlier unknowns)."""
    def go(k, env):
        if k == len(unknowns):
            yield dict(env)
            return
        u = unknowns[k]
        lo, n = ev(u.lo, env), ev(u.extent, env)
        for x in range(lo, lo + n):
            env[u] = x
            yield from go(k + 1, env)
        env.pop(u, None)
    yield from go(0, dict(env))


def axis_points(axes, env):
    def go(k, env):
        if k == len(axes):
            yield env
            return
        ax = axes[k]
        lo, n = ev(ax.lo, env), ev(ax.extent, env)
        assert n >= 0, f"negative extent {n} of axis {ax.name}"
        for x in range(lo, lo + n):
            env[ax] = x
            yield from go(k + 1, env)
        env.pop(ax, None)
    yield from go(0, dict(env))


def check(indices, unknowns, constraints=(), params=None, targets=None, label="", pad=2,
          max_points=None, gate=False, exact=False):
    """Compare `invert` with enumeration; returns the Inversion and the max points per target.
    `exact`: every point the new axes visit is a solution (no condition filters any out)."""
    params = dict(params or {})
    tg = targets or [Var(f"j{d}") for d in range(len(indices))]
    res = invert(indices, unknowns, tg, constraints, gate=gate)
    assert res is not None, label
    pre = defaultdict(list)
    for env in box_points(unknowns, params):
        if all(ev(c, env) for c in constraints):
            pre[tuple(ev(i, env) for i in indices)].append(tuple(env[u] for u in unknowns))
    if targets is not None:  # IterVar targets: their own domains
        ranges = [range(ev(t.lo, params), ev(t.lo, params) + ev(t.extent, params)) for t in targets]
    else:
        ranges = []
        for d in range(len(indices)):
            vals = [k[d] for k in pre] or [0]
            ranges.append(range(min(vals) - pad, max(vals) + pad + 1))
    most = 0
    for jt in itertools.product(*ranges):
        env = dict(params)
        env.update(zip(tg, jt))
        got, visited = [], 0
        for aenv in axis_points(res.new_axes, env):
            visited += 1
            if all(ev(c, aenv) for c in res.conditions):
                got.append(tuple(ev(res.subst[u], aenv) for u in unknowns))
        most = max(most, visited)
        assert not exact or visited == len(got), f"{label}: target {jt}: {visited} points visited " \
            f"for {len(got)} solutions\n{describe(res)}"
        assert sorted(got) == sorted(pre.get(jt, [])), (
            f"{label}: target {jt}: solver {sorted(got)} != brute force {sorted(pre.get(jt, []))}\n"
            f"{describe(res)}")
    if max_points is not None:
        assert most <= max_points, f"{label}: {most} iterated points per target > {max_points}"
    return res, most


def describe(res) -> str:
    lines = [f"axis {a.name} in [{a.lo}, {a.lo} + {a.extent})" for a in res.new_axes]
    lines += [f"{u.name} = {e}" for u, e in res.subst.items()]
    lines += [f"if {c}" for c in res.conditions]
    return "\n".join(lines)


def ax(name, n, lo=0, kind="data"):
    return IterVar(name, te.const(lo) if isinstance(lo, int) else lo,
                   te.const(n) if isinstance(n, int) else n, kind)


# -- hand-picked systems --------------------------------------------------------------------------

@pytest.mark.parametrize("s,d,K,p", [(1, 1, 3, 1), (2, 1, 3, 1), (2, 1, 2, 0), (3, 1, 5, 2),
                                     (1, 2, 3, 2), (2, 2, 3, 1), (2, 3, 3, 0), (3, 2, 4, 1),
                                     (4, 1, 3, 0)])
def test_conv_1d(s, d, K, p):
    h, kh = ax("h", 6), ax("kh", K, kind="reduce")
    res, most = check([h * s + kh * d - p], [h, kh], label=f"conv s={s} d={d} K={K} p={p}")
    # tight: a strided window visits at most ceil(K/s') taps per target, s' = s / gcd(s, d)
    assert most <= -(-K // (s // math.gcd(s, d)))


@pytest.mark.parametrize("s,K", [(2, 3), (3, 7), (2, 5)])
def test_strided_conv_bounds_are_tight(s, K):
    h, kh = ax("oh", 8), ax("kh", K, kind="reduce")
    res, most = check([h * s + kh - 1], [h, kh], max_points=-(-K // s), label="tight")
    assert [a.name for a in res.new_axes] == ["oh"]  # iterates output rows, named after them
    assert not res.conditions


def test_conv_2d_with_padding_guard():
    n, f, oh, ow = ax("n", 2), ax("f", 2), ax("oh", 3), ax("ow", 3)
    c, kh, kw = ax("c", 2, kind="reduce"), ax("kh", 3, kind="reduce"), ax("kw", 3, kind="reduce")
    H = W = 5
    y, x = oh * 2 + kh - 1, ow * 2 + kw - 1
    guard = te.all(y >= 0, y < H, x >= 0, x < W)
    res, _ = check([n, c, y, x], [n, f, oh, ow, c, kh, kw], constraints=[guard], pad=1,
                   label="conv2d")
    assert [a.name for a in res.new_axes] == ["f", "oh", "ow"]


def test_conv_targets_with_domains_drop_implied_conditions():
    h, kh = ax("h", 8), ax("kh", 3, kind="reduce")
    j = ax("j", 8)
    y = h + kh - 1
    res, _ = check([y], [h, kh], constraints=[te.all(y >= 0, y < 8)], targets=[j], label="pad")
    assert res.conditions == ()
    assert [a.name for a in res.new_axes] == ["kh"]  # unit stride: loop over the taps


def test_transpose_and_permutation():
    i, j, k = ax("i", 3), ax("j", 4), ax("k", 2)
    res, _ = check([k, i, j], [i, j, k], label="transpose")
    assert res.new_axes == ()


def test_diagonal():
    i, k = ax("i", 4), ax("k", 3, kind="reduce")
    res, _ = check([i, i], [i, k], label="diag")
    assert [a.name for a in res.new_axes] == ["k"]


def test_broadcast():
    i, j = ax("i", 3), ax("j", 5)
    res, _ = check([j], [i, j], label="broadcast")
    assert [a.name for a in res.new_axes] == ["i"]


def test_reshape_via_div_mod():
    i, w = ax("i", 4), ax("w", 6)
    res, most = check([(i * 6 + w) // 4, (i * 6 + w) % 4], [i, w], label="reshape")
    assert res.new_axes == () and most == 1  # a pure gather: no loop


def test_flatten_and_3d_mixed_radix():
    a, b, c = ax("a", 2), ax("b", 3), ax("c", 4)
    res, _ = check([a * 12 + b * 4 + c], [a, b, c], label="flatten")
    assert res.new_axes == ()
    n = ax("n", 24)
    res, _ = check([n // 12, (n // 4) % 3, n % 4], [n], label="unflatten")
    assert res.new_axes == ()


def test_pixel_shuffle():
    r, C = 2, 2
    n, c, h, w = ax("n", 1), ax("c", C), ax("h", 4), ax("w", 4)
    idx = [n, c * r * r + (h % r) * r + w % r, h // r, w // r]
    res, most = check(idx, [n, c, h, w], label="pixel_shuffle", pad=1)
    assert res.new_axes == () and most == 1


def test_layout_nchw_to_nchw4c():
    n, c, h = ax("n", 1), ax("c", 8), ax("h", 2)
    res, _ = check([n, c // 4, h, c % 4], [n, c, h], label="nchw4c")
    assert res.new_axes == ()


def test_upsample_nearest():
    i = ax("i", 8)
    res, _ = check([i // 2], [i], label="upsample")
    assert len(res.new_axes) == 1


def test_avg_pool_stride_equals_kernel_is_a_gather():
    h, kh = ax("h", 4), ax("kh", 2, kind="reduce")
    res, most = check([h * 2 + kh], [h, kh], label="pool")
    assert res.new_axes == () and most == 1


def test_2d_non_unit_coefficients():
    a, b = ax("a", 5, lo=-1), ax("b", 4)
    check([a * 2 + b * 3, a - b * 2 + 1], [a, b], label="2x2")
    check([a * 2 + b * 4 - 3, a * 3 + b * 6], [a, b], label="singular 2x2")


def test_rank_deficient_and_overdetermined():
    i, k = ax("i", 4), ax("k", 3, kind="reduce")
    check([i + k, i + k], [i, k], label="rank deficient")
    check([i, i + 1, i * 2], [i, k], label="overdetermined")
    check([i * 2 + k * 2, i + k], [i, k], label="dependent rows")
    check([te.const(3)], [i], label="constant index")


def test_symbolic_extents():
    n = te.var("n")
    h, kh = ax("h", n), ax("kh", 3, kind="reduce")
    for nv in (1, 2, 5):
        check([h * 2 + kh - 1], [h, kh], params={n: nv}, label=f"n={nv}")
        check([h + kh], [h, kh], params={n: nv}, label=f"n={nv}")
    off = te.var("p")
    for pv in (0, 2):
        check([h - off + kh], [h, kh], params={n: 4, off: pv}, label=f"p={pv}")


def test_triangular_domain():
    i = ax("i", 5)
    k = IterVar("k", te.const(0), i + 1, "reduce")  # causal: k <= i
    check([k], [i, k], label="triangular")
    check([i - k], [i, k], label="triangular diff")


def test_affine_and_nonaffine_constraints():
    i, k = ax("i", 6), ax("k", 4, kind="reduce")
    check([i + k], [i, k], constraints=[i * 2 - k > 1], label="affine guard")
    res, _ = check([i], [i, k], constraints=[i.ne(k)], label="ne guard")
    assert res.conditions  # i != k cannot become bounds
    check([i], [i, k], constraints=[((i + k) % 3).eq(0)], label="mod guard")
    check([i], [i, k], constraints=[te.logical_not(k > i)], label="not guard")
    check([i], [i, k], constraints=[te.any(k < 1, k > 2)], label="or guard")


def test_data_dependent_and_nonlinear_return_none():
    idx = te.placeholder((5,), "int32", name="idx")
    i, k = ax("i", 5), ax("k", 3)
    j = Var("j")
    assert invert([idx[i]], [i], [j]) is None
    assert invert([i * k], [i, k], [j]) is None
    assert invert([te.min(i, 3)], [i], [j]) is None
    assert invert([i * te.var("n")], [i], [j]) is None
    assert invert([i // te.var("n")], [i], [j]) is None
    # a read that does not depend on the unknowns is a parameter, not a data dependence
    off = te.placeholder((1,), "int32", name="off")
    res = invert([i + off[0]], [i], [j])
    assert res is not None and res.new_axes == ()


def test_far_targets_give_empty_loops_not_negative_extents():
    h, kh = ax("h", 3), ax("kh", 3, kind="reduce")
    check([h * 2 + kh], [h, kh], pad=8, label="far targets")  # check() asserts extent >= 0
    check([h * 3 + kh * 2], [h, kh], pad=8, label="far targets, 2 taps")


def test_divisibility_condition_when_unavoidable():
    h, kh = ax("h", 6), ax("kh", 3, kind="reduce")
    res, _ = check([h * 2 + kh * 2 - 1], [h, kh], label="s=d=2")
    assert any("% 2 == 0" in str(c) for c in res.conditions)


@pytest.mark.parametrize("s,d,K,p", [(2, 2, 3, 1), (3, 3, 2, 0), (3, 1, 1, 0), (2, 6, 2, 1),
                                     (4, 2, 3, 1), (2, 1, 3, 1)])
def test_gate_makes_the_domain_exact(s, d, K, p):
    """gate=True (issue #29): the conditions on the targets alone (gcd(s, d) | j + p; a 1x1
    window's s | j) become the first new axis' extent, so a target no point reaches visits
    nothing, even over an axis the index does not use (output channels f)."""
    h, f, kh = ax("h", 6), ax("f", 4, kind="reduce"), ax("kh", K, kind="reduce")
    res, _ = check([h * s + kh * d - p], [h, f, kh], gate=True, exact=True,
                   label=f"gated conv s={s} d={d} K={K} p={p}")
    assert not res.conditions
    if math.gcd(s, d) > 1 or K == 1:
        assert "% " in str(res.new_axes[0].extent)  # select(divisible, extent, 0)


def _solve_str() -> str:
    h, kh = ax("oh", 8), ax("kh", 3, kind="reduce")
    c = ax("c", 8)
    res = invert([h * 2 + kh - 1, c // 4, c % 4], [h, c, kh], [Var("j0"), Var("j1"), Var("j2")],
                 [h * 2 + kh - 1 >= 0])
    return describe(res)


def test_deterministic():
    assert _solve_str() == _solve_str()


def test_readable_output():
    h, kh = ax("oh", 8), ax("kh", 3, kind="reduce")
    res = invert([h * 2 + kh - 1], [h, kh], [Var("j")])
    assert str(res.subst[kh]) == "j + 1 - 2 * oh"
    assert str(res.subst[h]) == "oh"


# -- random systems --------------------------------------------------------------------------------

def _random_index(rng, us):
    e = te.const(rng.randint(-3, 3))
    for u in rng.sample(us, rng.randint(1, len(us))):
        c = rng.choice([-3, -2, -1, 1, 1, 2, 3])
        e = e + u * c
    if rng.random() < 0.3:
        c = rng.randint(2, 4)
        e = te.floordiv(e, c) if rng.random() < 0.5 else te.floormod(e, c)
        if rng.random() < 0.3:
            e = e * rng.choice([2, 3]) + us[0]
    return e


def _random_constraint(rng, us):
    u, v = rng.choice(us), rng.choice(us)
    return rng.choice([
        lambda: u * rng.randint(-2, 2) + v * rng.randint(-2, 2) + rng.randint(-2, 3) >= 0,
        lambda: u.ne(v),
        lambda: te.floormod(u + v, 2).eq(0),
        lambda: u < v + 2,
    ])()


@pytest.mark.parametrize("block", range(6))
def test_random_systems(block):
    for seed in range(block * 60, block * 60 + 60):
        rng = random.Random(seed)
        n = rng.randint(1, 3)
        us = [ax(f"u{k}", rng.randint(1, 5), lo=rng.randint(-2, 2),
                 kind=rng.choice(["data", "reduce"])) for k in range(n)]
        m = rng.randint(1, 3 if n > 1 else 2)
        idx = [_random_index(rng, us) for _ in range(m)]
        cons = [_random_constraint(rng, us) for _ in range(rng.choice([0, 0, 1, 2]))]
        try:
            check(idx, us, constraints=cons, pad=1, label=f"seed={seed}")
        except AssertionError as err:
            raise AssertionError(f"random system seed={seed}: indices {idx}, constraints {cons}\n"
                                 f"{err}") from None


def test_mismatched_targets_is_a_clear_error():
    i = ax("i", 3)
    with pytest.raises(ValueError, match="one target per index"):
        invert([i, i], [i], [Var("j")])
