"""Issue 15, item 3: texpr_ad manages BLAS threads around its own contraction stages.

Inside `stack_matmul` every loaded BLAS library runs on one thread (texpr_ad splits the product
over its own threads); the caller's count is restored afterwards, also after concurrent and
failing calls, and a fresh process with the default environment (no OPENBLAS_NUM_THREADS)
runs the kernels correctly and keeps NumPy's BLAS thread count.
"""
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")

import texpr_ad as ta  # noqa: E402
from texpr_ad import te  # noqa: E402
from texpr_ad.kernels import blas_threads, numba_cpu  # noqa: E402

pytestmark = pytest.mark.skipif(not blas_threads.blas_handles(),
                                reason="no BLAS library that threadpoolctl can control")


def _blas_counts() -> list[int]:
    return [get() for get, _ in blas_threads.blas_handles()]


def _matmul_kernel(n: int = 96, dtype: str = "float64"):
    X = te.placeholder((n, n), dtype, name="X")
    k = te.reduce_axis((0, n), name="k")
    Y = te.compute((n, n), lambda i, j: te.sum(X[i, k] * X[k, j], axis=k), name="Y")
    return ta.build([Y], [X])  # n**3 >= 2**18: stack_matmul splits it over Numba's threads


@pytest.fixture
def seen(monkeypatch):
    """The BLAS thread counts each np.matmul inside `stack_matmul` ran with."""
    log: list[list[int]] = []

    def matmul(*args, **kw):
        log.append(_blas_counts())
        return np.matmul(*args, **kw)

    class NumPy:  # numpy, with a recording matmul
        def __getattr__(self, name):
            return matmul if name == "matmul" else getattr(np, name)

    monkeypatch.setattr(numba_cpu, "np", NumPy())
    return log


def test_contraction_runs_blas_single_threaded_and_restores(seen):
    mm = _matmul_kernel()
    m = np.random.default_rng(0).random((96, 96))
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert _blas_counts() and set(_blas_counts()) == {3}
        np.testing.assert_allclose(mm(m)[0], m @ m, rtol=1e-12)
        assert set(_blas_counts()) == {3}  # the caller's setting is back
    assert seen and all(c == [1] * len(c) for c in seen), seen


def test_concurrent_calls_restore_the_callers_count(seen):
    mm = _matmul_kernel()
    m = np.random.default_rng(1).random((96, 96))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                np.testing.assert_allclose(mm(m)[0], m @ m, rtol=1e-12)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        assert set(_blas_counts()) == {2}
    assert len(seen) >= 20 and all(c == [1] * len(c) for c in seen)


def test_a_failing_body_restores_the_count():
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        with pytest.raises(ZeroDivisionError):
            with blas_threads.single_threaded():
                assert set(_blas_counts()) == {1}
                1 / 0
        assert set(_blas_counts()) == {2}
        with blas_threads.single_threaded():  # the depth count was unwound too
            assert set(_blas_counts()) == {1}
        assert set(_blas_counts()) == {2}


SCRIPT = textwrap.dedent('''
    import json
    import numpy as np
    import texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.ops import nn
    from texpr_ad.kernels.blas_threads import blas_handles

    before = [get() for get, _ in blas_handles()]
    rng = np.random.default_rng(0)
    x, w = te.placeholder((64, 128), "float64", name="x"), te.placeholder((96, 128), "float64", name="w")
    y = nn.dense(x, w)
    head = te.placeholder((64, 96), "float64", name="head")
    fwd, bwd = ta.build([y], [x, w]), ta.build(ta.grad(y, [x, w], head=head), [x, w, head])
    a, b, g = rng.random((64, 128)), rng.random((96, 128)), rng.random((64, 96))
    for _ in range(3):
        np.testing.assert_allclose(fwd(a, b)[0], a @ b.T, rtol=1e-12)
        ga, gb = bwd(a, b, g)
        np.testing.assert_allclose(ga, g @ b, rtol=1e-12)
        np.testing.assert_allclose(gb, g.T @ a, rtol=1e-12)
    print(json.dumps({"before": before, "after": [get() for get, _ in blas_handles()]}))
''')


def test_default_environment_subprocess(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["TEXPR_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, text=True, capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = json.loads(r.stdout.splitlines()[-1])
    assert counts["before"] and counts["before"] == counts["after"], counts  # NumPy's default
