"""Issue 13, class 7: kernels are safe from threads and from forked children on every Numba
threading layer (see texpr_ad/kernels/threads.py).

Each case runs in a fresh interpreter (the layer is chosen once per process) with a timeout,
so a regression shows as a failure, not a hung or aborted test run.  Before: a fork pool after
a parallel kernel hung forever under GNU OpenMP, and 8 threads aborted the process under
workqueue, and NUMBA_THREADING_LAYER=tbb failed ("Intel TBB is required") with pip's tbb
installed, whose libtbb the loader does not find.
"""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import multiprocessing as mp, threading, warnings
    import numpy as np, numba
    import texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.kernels.threads import STATE

    n = 1 << 16
    A = te.placeholder((n,), "float64", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    X = te.placeholder((64, 64), "float64", name="X")
    k = te.reduce_axis((0, 64), name="k")
    Y = te.compute((64, 64), lambda i, j: te.sum(X[i, k] * X[k, j], axis=k), name="Y")
    scale, mm = ta.build([B], [A]), ta.build([Y], [X])  # mm: a BLAS stage on Python threads
    X32 = te.placeholder((128, 128), "float32", name="X32")
    k32 = te.reduce_axis((0, 128), name="k32")
    Y32 = te.compute((128, 128), lambda i, j: te.sum(X32[i, k32] * X32[k32, j], axis=k32), name="Y32")
    mm32 = ta.build([Y32], [X32])  # float32: texpr_ad's own GEMM (TEXPR_AD_GEMM=native), a prange
    x = np.arange(n, dtype="float64")
    m = np.random.default_rng(0).random((64, 64))
    m32 = m.astype("float32").repeat(2, 0).repeat(2, 1)

    def work(_=None):
        for _ in range(10):
            assert (scale(x)[0] == x * 2 + 1).all()
            assert np.allclose(mm(m)[0], m @ m)
            assert np.allclose(mm32(m32)[0], m32.astype("float64") @ m32, rtol=1e-4, atol=1e-3)
        return 1

    work()                               # the parent runs parallel kernels first
    print("layer", numba.threading_layer(), "gnu_omp", STATE.gnu_omp, flush=True)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("threads ok", flush=True)
    with mp.get_context("fork").Pool(2) as pool:
        print("fork pool ok", sum(pool.map(work, range(4))), flush=True)
''')


def _run(layer: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEXPR_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_NUM_THREADS": "2",
           "TEXPR_AD_GEMM": "native"}
    if layer:
        env["NUMBA_THREADING_LAYER"] = layer
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the interpreter and its pool workers
        out, err = p.communicate()
        pytest.fail(f"layer {layer or 'default'}: hung\n{out}\n{err[-2000:]}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _has_tbb() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        return distribution("tbb") is not None
    except PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("proc")  # the first case compiles, the others load


@pytest.mark.parametrize("layer", ["", "omp", "workqueue", "tbb"])
def test_threads_and_fork_pool_after_parallel_kernels(layer, shared_cache):
    if layer == "tbb" and not _has_tbb():
        pytest.skip("the tbb package (extra `tbb`) is not installed")
    r = _run(layer, shared_cache)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "threads ok" in r.stdout and "fork pool ok 4" in r.stdout, r.stdout
    if layer:
        assert f"layer {layer}" in r.stdout
    if "gnu_omp True" in r.stdout:  # forked children ran the serial build, and said so once each
        assert "run serially" in r.stderr and "ThreadingWarning" in r.stderr


def test_threading_warning_is_a_texpr_warning():
    from texpr_ad.errors import TexprWarning
    from texpr_ad.kernels.threads import ThreadingWarning
    assert issubclass(ThreadingWarning, TexprWarning)
