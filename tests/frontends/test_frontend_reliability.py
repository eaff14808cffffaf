"""Issue #28, front ends: what a new user meets calling the PyTorch and JAX ops the wrong way or
in an odd case (mixed devices, integer outputs, non-tensor arguments, dynamic shapes, half
precision, 64-bit types with JAX's x64 off).  Each defect found is a test; the other members
of each class found beside it are tests too.  Random bad arguments: tests/errors/test_fuzz.py."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te

_ids = itertools.count()


def _name(base: str) -> str:
    """torch.library ops cannot be redefined: one fresh name per op made here."""
    return f"rel_{base}_{next(_ids)}"


def _scaled(x, y):
    return te.compute(x.shape, lambda i: x[i] * y[i] * 2.0, name="scaled")


def _sign_and_square(x):
    """An integer output next to a float one."""
    return [te.compute(x.shape, lambda i: (x[i] > 0).astype("int32"), name="sign"),
            te.compute(x.shape, lambda i: x[i] * x[i], name="square")]


def _positive(x):
    return te.compute(x.shape, lambda i: x[i] > 0, name="positive")  # bool output only


def _rowsum(x, w):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    return te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j] * w[j], axis=j), name="rowsum")


NOT_TENSORS = [2.0, 3, True, None, "y", (1.0, 2.0, 3.0), [1.0, 2.0, 3.0], object()]


def _type_name(v) -> str:
    return type(v).__qualname__


# -- the core: integer outputs are not differentiated by ta.vjp (both front ends use it) --------

def test_vjp_of_an_op_with_an_integer_output_differentiates_the_float_ones():
    """Before: GradientError 'only float outputs can be differentiated' from ta.vjp, custom_op's
    forward/backward and so both front ends, even when only the float output was used."""
    x = np.array([-1.0, 0.5, 2.0])
    op = ta.custom_op(_sign_and_square, name="sign_and_square")
    (s, q), res = op.forward(x)
    assert s.dtype == np.int32 and list(s) == [0, 1, 1]
    (gx,) = op.backward(res, np.zeros(3, np.int32), np.ones(3))
    np.testing.assert_allclose(gx, 2 * x)
    X = te.placeholder((3,), "float64", name="X")
    fwd, bwd = ta.vjp(_positive(X), [X])  # no float output at all: no gradient
    outs, res = fwd(x)
    assert outs[0].dtype == np.bool_ and bwd(res, np.ones(3, bool)) == (None,)


def test_reference_evaluator_on_an_empty_output_with_a_reduction():
    """Found by the front-end fuzz (its reference is te.evaluate): a 0-row matmul raised
    ValueError 'cannot reshape array of size 0' where the kernels return an empty array."""
    A = te.placeholder((0, 4), "float64", name="A")
    W = te.placeholder((4, 2), "float64", name="W")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((0, 2), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    (y,) = te.evaluate([Y], {A: np.zeros((0, 4)), W: np.ones((4, 2))})
    assert y.shape == (0, 2) and y.dtype == np.float64


def _matmul(A, W):
    k = te.reduce_axis((0, 4), name="k")
    return te.compute((A.shape[0], W.shape[1]), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k),
                      name="mm")


def test_a_te_function_failing_on_the_arguments_shapes_names_the_call():
    """Found by the front-end fuzz: a 0-dim argument made the te function's own `A.shape[0]`
    raise IndexError out of custom_op and both front ends (torch: inside its dispatcher)."""
    op = ta.custom_op(_matmul, name="mm")
    want = r"mm called with A \(\):float64, W \(4, 2\):float64: its te function raised IndexError"
    with pytest.raises(ta.ArrayArgumentError, match=want):
        op(np.float64(0.5), np.ones((4, 2)))


# -- PyTorch ------------------------------------------------------------------------------------

class _Stand:
    """A stand-in for a tensor on a device this machine may not have (only .device and .is_cpu
    are read)."""

    def __init__(self, dev: str):
        import torch
        self.device = torch.device(dev)
        self.is_cpu = self.device.type == "cpu"


def test_torch_a_cpu_tensor_next_to_a_meta_one_is_a_device_error():
    """Before: the fake kernel ran and returned uninitialized memory on the CPU."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_scaled, name=_name("scaled"))
    cpu, meta = torch.ones(3), torch.ones(3, device="meta")
    with pytest.raises(RuntimeError, match="is not on the expected device"):
        torch.mul(cpu, meta)  # PyTorch's own ops: a RuntimeError
    for args, (dev, gdev) in [((cpu, meta), ("meta", "cpu")), ((meta, cpu), ("cpu", "meta"))]:
        with pytest.raises(tt.TorchDeviceError) as e:
            op(*args)
        assert isinstance(e.value, RuntimeError) and isinstance(e.value, ta.TexprError)
        want = (f"{op.name}: expected all tensors on one device, but argument 1 ('y') is on {dev} "
                f"and argument 0 ('x') on {gdev}; move them to one device")
        assert want in str(e.value), str(e.value)
    # the backward op too: a cotangent on another device than the saved tensors
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(tt.TorchDeviceError, match="cotangent 0 is on meta"):
        op.vjp_op([torch.ones(3, device="meta")], [x.detach(), x.detach()], [torch.ones(3)],
                  [True, True])


def test_torch_meta_and_fake_tensors_alone_still_give_shapes():
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    from torch._subclasses.fake_tensor import FakeTensorMode
    op = tt.custom_op(_rowsum, name=_name("rowsum"))
    y = op(torch.empty(5, 3, device="meta"), torch.empty(3, device="meta"))
    assert y.shape == (5,) and y.device.type == "meta"
    with FakeTensorMode():
        y = op(torch.empty(4, 3), torch.empty(3))
    assert y.shape == (4,) and y.device.type == "cpu"
    assert not op.core._cache  # nothing built


def test_torch_cpu_next_to_cuda_and_devices_without_kernels():
    """No GPU here: the device decision is tested on stand-ins (the same code the op runs)."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_scaled, name=_name("scaled"))
    with pytest.raises(tt.TorchDeviceError, match=r"argument 1 \('y'\) is on cuda:0 and argument 0 "
                                                  r"\('x'\) on cpu; move them to one device"):
        op._device((), [_Stand("cpu"), _Stand("cuda:0")])
    with pytest.raises(tt.TorchDeviceError, match=r"argument 1 \('y'\) is on cuda:1 and argument 0 "
                                                  r"\('x'\) on cuda:0"):
        op._device((), [_Stand("cuda:0"), _Stand("cuda:1")])
    assert op._device((), [_Stand("cuda:0"), _Stand("cuda:0")]) == torch.device("cuda:0")
    with pytest.raises(tt.TorchDeviceError, match=r"on xpu; texpr_ad ops run on CPU and CUDA"):
        tt._on_cuda(torch.device("xpu"), op.name)


def test_torch_integer_outputs_are_returned_and_not_differentiated():
    """Before: GradientError from any call, even under torch.no_grad()."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_sign_and_square, name=_name("sign_and_square"))
    x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        s, q = op(x)
    assert s.dtype == torch.int32 and s.tolist() == [0, 1, 1]
    s, q = op(x)
    assert not s.requires_grad and q.requires_grad
    (gx,) = torch.autograd.grad((q * s).sum(), [x])
    torch.testing.assert_close(gx, 2 * x.detach() * s)
    assert torch.autograd.gradcheck(lambda x: op(x)[1], (x,))
    only = tt.custom_op(_positive, name=_name("positive"))
    p = only(x)
    assert p.dtype == torch.bool and p.tolist() == [False, True, True] and not p.requires_grad


@pytest.mark.parametrize("value", NOT_TENSORS[3:] + [np.ones(3)], ids=lambda v: type(v).__name__)
def test_torch_non_tensor_arguments_name_the_argument_and_the_fix(value):
    """Before: RuntimeError "Expected a value of type 'List[Tensor]' for argument 'xs'"."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_scaled, name=_name("scaled"))
    kind = "numpy.ndarray" if isinstance(value, np.ndarray) else _type_name(value)
    with pytest.raises(ta.OpArgumentError) as e:
        op(torch.ones(3), value)
    assert isinstance(e.value, TypeError)
    msg = str(e.value)
    assert msg.startswith(f"{op.name}: argument 1 ('y') is of type {kind}, not a torch tensor or "
                          f"Python number; convert it to a tensor (torch.as_tensor(value))"), msg


def test_torch_keyword_and_miscounted_arguments():
    """Before: a plain TypeError from TorchOp.__call__ for a keyword argument."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_scaled, name=_name("scaled"))
    with pytest.raises(ta.OpArgumentError, match=rf"{op.name}: got keyword argument\(s\) 'y'; pass the "
                                                 r"arguments positionally"):
        op(torch.ones(3), y=torch.ones(3))
    for n in (0, 1, 3):
        with pytest.raises(ta.CustomOpError, match=rf"{op.name} takes 2 arrays \(x, y\), got {n}"):
            op(*[torch.ones(3)] * n)


HALF_AND_COMPLEX = [("float16", "compute in float32"), ("bfloat16", "compute in float32"),
                    ("complex64", "pass the real and imaginary parts")]


@pytest.mark.parametrize("dtype,fix", HALF_AND_COMPLEX)
def test_torch_dtypes_the_kernels_do_not_compute_in(dtype, fix):
    """Before: float16 was a ScheduleError naming a placeholder, not the op or argument."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_scaled, name=_name("scaled"))
    with pytest.raises(ta.OpArgumentError, match=rf"{op.name}: argument 0 \('x'\) has dtype {dtype}, "
                                                 rf"which texpr_ad kernels do not compute in; {fix}"):
        op(torch.ones(3, dtype=getattr(torch, dtype)), torch.ones(3))


def test_torch_layouts_and_empty_tensors():
    """Strided, expanded (stride 0) and flipped inputs, and 0-size ones, forward and backward."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_rowsum, name=_name("rowsum"))
    base = torch.randn(6, 8, dtype=torch.float64)
    w = torch.randn(3, dtype=torch.float64)
    cases = [base[::2, 1:4], base[:1, :3].expand(4, 3), base[:4, :3].flip(0), base.t()[:3, :3],
             torch.ones(0, 3, dtype=torch.float64)]
    for x in cases:
        x = x.clone().requires_grad_() if x.numel() == 0 else x.detach().requires_grad_()
        y = op(x, w)
        torch.testing.assert_close(y, (x.detach() ** 2 * w).sum(1))
        if x.numel():
            (gx,) = torch.autograd.grad(y.sum(), [x])
            torch.testing.assert_close(gx, 2 * x.detach() * w)
    empty_rows = op(torch.ones(2, 0, dtype=torch.float64), torch.ones(0, dtype=torch.float64))
    torch.testing.assert_close(empty_rows, torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic=True"])
def test_torch_compile_with_dynamic_shapes(dynamic):
    """Before: TypeError 'unhashable type: non-nested SymInt' from the second batch size on
    (automatic dynamic shapes) or from the first call (dynamic=True).  Now the op's sizes are
    specialized: each new size recompiles and builds kernels for it; results match eager."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(_rowsum, name=_name("rowsum"))
    f = torch.compile(lambda x, w: (op(x, w) * x[:, 0]).sum(), backend="aot_eager", dynamic=dynamic)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    for n in (4, 5, 6):
        x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
        got = f(x, w)
        gx, gw = torch.autograd.grad(got, [x, w])
        want = (op(x, w) * x[:, 0]).sum()
        torch.testing.assert_close(got, want)
        for a, b in zip((gx, gw), torch.autograd.grad(want, [x, w]), strict=True):
            torch.testing.assert_close(a, b)


def test_torch_planner_errors_are_texpr_errors():
    """A te function computing in float16 inside (float32 arguments): the planner's message."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    op = tt.custom_op(lambda x: te.compute(x.shape, lambda i: x[i].astype("float16").astype("float32"),
                                           name="through_half"), name=_name("half"))
    with pytest.raises(ta.TexprError, match="float16"):
        op(torch.ones(3))


# -- JAX ----------------------------------------------------------------------------------------

@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


def test_jax_integer_outputs_are_returned_and_not_differentiated(jax):
    """Before: GradientError under jax.grad even when only the float output was used."""
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(_sign_and_square, name="sign_and_square")
    x = jnp.asarray([-1.0, 0.5, 2.0])
    s, q = jax.jit(op)(x)
    assert s.dtype == jnp.int32 and s.tolist() == [0, 1, 1]
    g = jax.jit(jax.grad(lambda x: jnp.sum(op(x)[1] * op(x)[0])))(x)
    np.testing.assert_allclose(g, 2 * x * s)
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda x: op(x)[1].sum()))(jnp.stack([x, 2 * x])),
                               jnp.stack([2 * x, 4 * x]))
    only = tj.custom_op(_positive, name="positive")
    assert only(x).dtype == jnp.bool_
    assert float(jax.grad(lambda x: jnp.sum(jnp.where(only(x), x, 0.0)))(x).sum()) == 2.0


@pytest.mark.parametrize("value", NOT_TENSORS[3:], ids=lambda v: type(v).__name__)
def test_jax_non_array_arguments_name_the_argument_and_the_fix(jax, value):
    """Before: AttributeError "'tuple' object has no attribute 'dtype'" (lists, None), a JAX
    TypeError (str), or the definition's error on a 0-dim array (Python numbers)."""
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(_scaled, name="scaled")
    with pytest.raises(ta.OpArgumentError) as e:
        op(jnp.ones(3), value)
    assert str(e.value).startswith(f"scaled: argument 1 ('y') is of type {_type_name(value)}, not a "
                                   f"JAX array or Python number; convert it to a tensor "
                                   f"(jnp.asarray(value))")


def test_jax_takes_numpy_arrays_and_refuses_keywords(jax):
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(_scaled, name="scaled")
    np.testing.assert_allclose(op(jnp.ones(3), np.arange(3.0)), [0.0, 2.0, 4.0])
    with pytest.raises(ta.OpArgumentError, match=r"scaled: got keyword argument\(s\) 'y'; pass the "
                                                 r"arguments positionally"):
        op(jnp.ones(3), y=jnp.ones(3))
    with pytest.raises(ta.CustomOpError, match=r"scaled takes 2 arrays \(x, y\), got 1"):
        op(jnp.ones(3))


@pytest.mark.parametrize("dtype,fix", HALF_AND_COMPLEX)
def test_jax_dtypes_the_kernels_do_not_compute_in(jax, dtype, fix):
    """Before: bfloat16 was reported as dtype '|V2'; float16 a JaxRuntimeError out of the callback."""
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(_scaled, name="scaled")
    with pytest.raises(ta.OpArgumentError, match=rf"scaled: argument 0 \('x'\) has dtype {dtype}, which "
                                                 rf"texpr_ad kernels do not compute in; {fix}"):
        op(jnp.ones(3, dtype=getattr(jnp, dtype)), jnp.ones(3))


def test_half_precision_is_one_error_class_in_both_front_ends():
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    import texpr_ad.jax as tj
    import texpr_ad.torch as tt
    assert tt.OpArgumentError is tj.OpArgumentError is ta.OpArgumentError
    top = tt.custom_op(_scaled, name=_name("scaled"))
    jop = tj.custom_op(_scaled, name=top.name)
    errors = []
    for call in (lambda: top(torch.ones(3, dtype=torch.bfloat16), torch.ones(3)),
                 lambda: jop(jax.numpy.ones(3, jax.numpy.bfloat16), jax.numpy.ones(3))):
        with pytest.raises(ta.OpArgumentError) as e:
            call()
        errors.append(str(e.value).split(";")[0])
    assert errors[0] == errors[1]


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_jax_64_bit_outputs_with_x64_off(dtype):
    """Before: JAX's 'result_shape_dtypes cannot specify 64-bit types', naming neither op nor output."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(lambda x: te.compute(x.shape, lambda i: x[i].astype(dtype), name="wide"),
                      name="widen")
    with jax.enable_x64(False):
        with pytest.raises(tj.JaxOpError, match=rf"widen: output 'wide' is {dtype}, but JAX has 64-bit "
                                                r"types disabled; enable them \(jax.config.update\("
                                                r"'jax_enable_x64', True\)\) or make the te function "
                                                r"compute in 32 bits"):
            op(jnp.ones(3))
    with jax.enable_x64(True):
        assert op(jnp.ones(3)).dtype.itemsize == 8


def test_jax_64_bit_saved_intermediate_with_x64_off():
    """The residuals too: a float64 row sum that the backward of a float32 output reads is
    recomputed there (it was a JaxOpError: JAX cannot hold it as a residual)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import texpr_ad.jax as tj

    def norm(x):
        j = te.reduce_axis((0, x.shape[1]), name="j")
        ss = te.compute((x.shape[0],), lambda i: te.sum(x[i, j].astype("float64") ** 2, axis=j),
                        name="ss")
        return te.compute(x.shape, lambda i, c: x[i, c] * te.rsqrt(ss[i]).astype("float32"), name="y")
    op = tj.custom_op(norm, name="norm64")
    with jax.enable_x64(False):
        x = jnp.ones((2, 3), jnp.float32)
        assert op(x).shape == (2, 3)  # the forward alone has no 64-bit output
        x = x * jnp.arange(1.0, 4.0, dtype=jnp.float32)
        def ref(x):
            return jnp.sum(jnp.sin(x * jax.lax.rsqrt(jnp.sum(x * x, 1, keepdims=True))))
        np.testing.assert_allclose(jax.grad(lambda x: jnp.sin(op(x)).sum())(x), jax.grad(ref)(x),
                                   rtol=1e-5, atol=1e-6)


def test_jax_numpy_float64_arguments_with_x64_off_are_taken_as_float32():
    """As JAX functions do (a member of the x64 class that already worked; kept working now that
    the op checks its arguments before jax.custom_vjp converts them)."""
    jax = pytest.importorskip("jax")
    import texpr_ad.jax as tj
    op = tj.custom_op(_scaled, name="scaled")
    with jax.enable_x64(False):
        y = op(np.arange(3.0), np.ones(3))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, [0.0, 2.0, 4.0])
        g = tj.custom_op(lambda t, idx: te.compute(idx.shape, lambda i: t[idx[i]] * 2.0, name="g"),
                         name="gather")(np.arange(4.0), np.array([3, 0], np.int64))
        assert g.dtype == np.float32 and g.tolist() == [6.0, 0.0]


def test_jax_export_with_a_symbolic_dim_is_a_clear_error(jax):
    """Before: InconclusiveDimensionOperation ('Symbolic dimension n used in a context that
    requires a constant'), naming neither the op nor the argument."""
    import jax.numpy as jnp
    from jax import export
    import texpr_ad.jax as tj
    op = tj.custom_op(_scaled, name="scaled")
    spec = jax.ShapeDtypeStruct(export.symbolic_shape("n"), jnp.float32)
    with pytest.raises(tj.JaxOpError, match=r"scaled: argument 0 \('x'\) has the symbolic shape \(n,\); "
                                            r"texpr_ad.jax ops take concrete shapes.*instead of "
                                            r"exporting"):
        export.export(jax.jit(op))(spec, spec)


def test_jax_planner_errors_are_raised_while_tracing(jax):
    """Before: the kernel was built inside the callback, so the planner's TexprError came out
    as JAX's JaxRuntimeError holding a traceback."""
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(lambda x: te.compute(x.shape, lambda i: x[i].astype("float16").astype("float32"),
                                           name="through_half"), name="half")
    x = jnp.ones(3, jnp.float32)
    for call in (lambda: op(x), lambda: jax.jit(op)(x), lambda: jax.grad(lambda x: op(x).sum())(x)):
        with pytest.raises(ta.TexprError, match="float16"):
            call()


def test_jax_a_kernel_error_at_run_time_comes_out_as_jax_runtime_error(jax):
    """Documented: a data-dependent error inside the callback (a gather index out of range) is
    JAX's JaxRuntimeError holding texpr_ad's message; JAX cannot re-raise it as it was."""
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(lambda t, idx: te.compute(idx.shape, lambda i: t[idx[i]] * 2.0, name="g"),
                      name="gather")
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"KernelIndexError.*'t'"):
        np.asarray(op(jnp.ones(4), jnp.asarray([0, 7])))
