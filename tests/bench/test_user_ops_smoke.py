"""The user-op bench (bench/user_ops.py): every operator's forward and gradients through
`texpr_ad.torch` against PyTorch autograd of its reference (float64, tiny shapes), a --quick run
on a few operators, and that a failing or wrong operator is reported in its row while the
others go on."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import user_ops  # noqa: E402
from bench.user_defs import USER_OPS, UserOp  # noqa: E402
from texpr_ad import te  # noqa: E402
from texpr_ad.testing import rel_error  # noqa: E402

TOL = 1e-10  # float64


def _forward_and_grads(fn, u: UserOp, arrays: dict[str, np.ndarray]):
    xs = {n: torch.from_numpy(a.astype(np.float64) if a.dtype.kind == "f" else a)
          .requires_grad_(n in u.diff) for n, a in arrays.items()}
    y = fn(*[xs[n] for n in u.args])
    g = torch.from_numpy(np.random.default_rng(1).standard_normal(tuple(y.shape)))
    return y.detach().numpy(), [x.numpy() for x in torch.autograd.grad(y, [xs[n] for n in u.diff], g)]


@pytest.mark.parametrize("name", sorted(USER_OPS))
def test_user_op_matches_torch(name: str):
    u = USER_OPS[name]
    arrays = u.make(True, np.random.default_rng(0))
    assert set(arrays) == set(u.args) and set(u.diff) <= set(u.args)
    y, grads = _forward_and_grads(user_ops.texpr_op(u), u, arrays)
    y_ref, grads_ref = _forward_and_grads(u.torch_fn, u, arrays)
    assert y.shape == y_ref.shape and rel_error(y, y_ref) < TOL, f"{name}: forward differs"
    for n, a, b in zip(u.diff, grads, grads_ref, strict=True):
        assert a.shape == b.shape and rel_error(a, b) < TOL, f"{name}: gradient of {n} differs"


def test_at_least_twelve_user_ops_none_from_the_registry():
    assert len(USER_OPS) >= 12
    tree = ast.parse(Path(user_ops.__file__).with_name("user_defs.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.startswith("texpr_ad.ops") for m in imported), imported


def _rows(out: str, names: list[str]) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.split()[:1] in [[n] for n in names]]


def test_quick_run(capsys):
    names = ["bias_gelu", "segment_sum", "rope"]
    assert user_ops.main(["--quick", "--only", ",".join(names), "--repeat", "1",
                          "--no-inductor"]) == 0
    out = capsys.readouterr().out
    assert "vector ISA" in out and "float32 contractions" in out
    rows = _rows(out, names)
    assert [r[0] for r in rows] == names and all(len(r) == 13 for r in rows), rows
    assert all(r[4] == "-" for r in rows)  # inductor not timed
    assert "failures and mismatches" not in out


def test_quick_run_with_inductor(capsys):
    assert user_ops.main(["--quick", "--only", "bias_gelu", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    (row,) = _rows(out, ["bias_gelu"])
    assert len(row) == 13 and "-" not in row, row  # every column, torch.compile's included
    assert "failures and mismatches" not in out


def test_failures_and_wrong_gradients_are_rows(monkeypatch, capsys):
    def out_of_bounds(x):
        return te.compute(x.shape, lambda i: x[i + 1], name="oob")

    def doubled(x):
        return te.compute(x.shape, lambda i: x[i] * 2.0, name="doubled")

    def arrays(q, rng):
        return {"x": rng.standard_normal(5).astype(np.float32)}

    bad = {u.name: u for u in (UserOp("t_broken", "test", out_of_bounds, lambda x: x, arrays, ("x",)),
                               UserOp("t_wrong", "test", doubled, lambda x: 3 * x, arrays, ("x",)),
                               USER_OPS["bias_gelu"])}
    monkeypatch.setattr(user_ops, "USER_OPS", bad)
    rows = user_ops.run(list(bad), quick=True, repeat=1, inductor=False)
    out = capsys.readouterr().out
    assert "texpr" in rows[0]["errors"] and "eager" in rows[0]["fwd"]  # eager still timed
    assert "! texpr failed: ArrayArgumentError" in out
    assert [m.split(":")[0] for m in rows[1]["mismatch"]] == ["fwd", "step", "bwd"]
    assert "! mismatch step: texpr err" in out
    assert not rows[2]["errors"] and not rows[2]["mismatch"] and set(rows[2]["step"]) == {
        "texpr", "eager"}
    assert "failures and mismatches:" in out and "t_broken: texpr failed" in out


def test_vector_isa_names_the_widest_family():
    assert user_ops.vector_isa({"sse4_2", "avx", "avx2", "fma"}) == "AVX2"
    assert user_ops.vector_isa({"avx2", "avx512f"}) == "AVX-512"
    assert user_ops.vector_isa({"fp", "asimd"}) == "NEON"
    assert user_ops.vector_isa(set()) == "scalar"


def test_bench_user_flag_runs_the_section(monkeypatch, capsys):
    from bench import __main__ as bench_main
    ran = []
    monkeypatch.setattr(user_ops, "run", lambda names, quick, repeat, inductor: ran.append(
        (names, quick, repeat, inductor)) or print("user op section") or [])
    assert bench_main.main(["--only", "reduce_sum", "--quick", "--repeat", "1", "--no-compile",
                            "--no-plain", "--no-jax", "--no-inductor", "--user"]) == 0
    out = capsys.readouterr().out
    assert out.index("reduce_sum") < out.index("user op section") < out.index("all rows")
    assert ran == [(list(USER_OPS), True, 1, False)]
