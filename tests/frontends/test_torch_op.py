"""texpr_ad.torch.custom_op: gradcheck on registry operators, agreement with PyTorch autograd of
the torch references, training in an nn.Module, torch.compile, and the argument errors."""
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import texpr_ad as ta  # noqa: E402
import texpr_ad.torch as tt  # noqa: E402
from texpr_ad import te  # noqa: E402
from texpr_ad.ops import get  # noqa: E402
from texpr_ad.report.torch_refs import TORCH_REFS  # noqa: E402
from texpr_ad.te.dag import replace_inputs  # noqa: E402

_ids = itertools.count()


def _name(base: str) -> str:
    """torch.library ops cannot be redefined: one fresh name per op made here."""
    return f"test_{base}_{next(_ids)}"


def _registry_op(name: str):
    s = get(name).sample("float64")
    op = tt.custom_op(lambda *xs: replace_inputs(s.outputs, dict(zip(s.inputs, xs, strict=True))),
                      name=_name(name))
    xs = [torch.from_numpy(a.copy()).requires_grad_(d and a.dtype.kind == "f")
          for a, d in zip(s.arrays, s.differentiable, strict=True)]
    return op, xs


REGISTRY_OPS = ["dense", "conv2d_strided", "softmax", "log_softmax", "layer_norm", "max_pool2d",
                "gelu_erf", "take", "cross_entropy", "scaled_dot_product_attention", "logsumexp",
                "prod_with_zero"]


@pytest.mark.parametrize("name", REGISTRY_OPS)
def test_gradcheck_and_torch_autograd_on_registry_operators(name):
    op, xs = _registry_op(name)
    assert torch.autograd.gradcheck(op, xs, eps=1e-6, atol=1e-6)
    # against PyTorch autograd of the reference implementation, with a random cotangent
    outs = op(*xs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    refs = TORCH_REFS[name](*[x.detach().clone().requires_grad_(x.requires_grad) for x in xs])
    gen = torch.Generator().manual_seed(0)
    cots = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    for o, r in zip(outs, refs, strict=True):
        torch.testing.assert_close(o, r.detach(), rtol=1e-9, atol=1e-10)
    wrt = [x for x in xs if x.requires_grad]
    ours = torch.autograd.grad(outs, wrt, cots)
    ref_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in xs]
    refs = TORCH_REFS[name](*ref_in)
    theirs = torch.autograd.grad(refs, [x for x in ref_in if x.requires_grad], cots)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def _two_outputs(x, y):
    s = te.compute(x.shape, lambda i: x[i] * y[i] + te.sin(x[i]), name="s")
    k = te.reduce_axis((0, x.shape[0]), name="k")
    t = te.compute((), lambda: te.sum(x[k] * x[k], axis=k), name="t")
    return [s, t]


def test_several_outputs_and_an_unused_output():
    op = tt.custom_op(_two_outputs, name=_name("two"))
    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    y = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, y))
    s, t = op(x, y)
    assert s.shape == (7,) and t.shape == ()
    (gx,) = torch.autograd.grad(t, [x])  # s unused: its cotangent is zeros
    torch.testing.assert_close(gx, 2 * x.detach())


def test_integer_input_gradient_is_none_in_the_backward():
    def gather_scale(x, idx):
        return te.compute(idx.shape, lambda i: x[idx[i]] * 2.0, name="g")
    op = tt.custom_op(gather_scale, name=_name("gather"))
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([4, 0, 4, 2], dtype=torch.int64)
    assert torch.autograd.gradcheck(lambda x: op(x, idx), (x,))
    y = op(x, idx)
    ctx = type("Ctx", (), {"saved_tensors": (x.detach(), idx, y.detach()), "n_in": 2, "n_out": 1,
                           "wrt": [True, False]})()
    grads = op._backward(ctx, [torch.ones(4, dtype=torch.float64)])  # x, idx, wrt
    assert grads[1] is None and grads[2] is None
    torch.testing.assert_close(grads[0], torch.tensor([2.0, 0, 2, 0, 4], dtype=torch.float64))
    assert y.shape == (4,)


def _rms_scale(x, g):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / float(d.value), name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def test_trains_inside_an_nn_module():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.g = torch.nn.Parameter(torch.ones(8))
            self.rms = tt.custom_op(_rms_scale, name=_name("rms"))

        def forward(self, x):
            return self.rms(self.lin(x), self.g).sum(-1)

    torch.manual_seed(0)
    net = Net()
    x, target = torch.randn(16, 8), torch.randn(16)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = ((net(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert net.g.grad is not None and losses[-1] < 0.5 * losses[0], losses


def test_under_torch_compile_as_an_opaque_op():
    op = tt.custom_op(_rms_scale, name=_name("rms_compiled"))
    f = torch.compile(lambda x, g: (op(x, g) * x).sum(), fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(8, dtype=torch.float64, requires_grad=True)
    f(x, g).backward()
    gx, gg = x.grad.clone(), g.grad.clone()
    x.grad = g.grad = None
    (op(x, g) * x).sum().backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gg, g.grad)


def test_fake_tensors_give_output_shapes_without_kernels():
    op = tt.custom_op(_two_outputs, name=_name("meta"))
    s, t = op(torch.empty(5, device="meta"), torch.empty(5, device="meta"))
    assert s.shape == (5,) and t.shape == () and s.dtype == torch.float32 and s.device.type == "meta"
    assert not op.core._cache  # nothing built


def test_non_contiguous_inputs_and_float32():
    op = tt.custom_op(_rms_scale, name=_name("rms_nc"))
    x = torch.randn(8, 6).t()  # (6, 8), not contiguous
    g = torch.randn(16)[::2]
    ref = x * g * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(op(x, g), ref, rtol=1e-5, atol=1e-6)


def test_output_is_a_view_of_the_kernel_result_and_inputs_are_not_copied():
    """A contiguous CPU tensor reaches the kernel as a .numpy() view: same memory."""
    from texpr_ad.torch import _host
    x = torch.randn(3, 4)
    assert np.shares_memory(_host(x), x.numpy())
    assert not np.shares_memory(_host(x.t()), x.numpy())


def test_errors_name_the_argument_and_the_fix():
    op = tt.custom_op(_rms_scale, name=_name("rms_err"))
    with pytest.raises(ta.OpArgumentError, match=r"argument 0 \('x'\) has dtype bfloat16.*x.float\(\)"):
        op(torch.randn(2, 8, dtype=torch.bfloat16), torch.randn(8))
    with pytest.raises(ta.TexprError, match=r"'g'.*\(5,\)"):  # the core's check
        op(torch.randn(2, 8), torch.randn(5))
    with pytest.raises(ta.CustomOpError, match="takes 2 arrays"):
        op(torch.randn(2, 8))
    with pytest.raises(tt.TorchOpError, match="already registered.*pass a new name="):
        tt.custom_op(_rms_scale, name=op.name)


def test_the_eager_fast_path_admits_plain_tensors_on_one_kernel_device_only():
    """The per-call fast path (`_plain_eager`) skips torch.library's dispatch: only for plain
    tensors all on the CPU (or all on one CUDA device Numba runs on); a None, a meta tensor or a
    CPU tensor next to a meta one take the dispatcher, which reports or handles them."""
    x = torch.ones(2)
    assert tt._plain_eager([x, torch.zeros(3)])
    assert not tt._plain_eager([x, None])  # checked before any device is read
    assert not tt._plain_eager([torch.ones(2, device="meta")])
    assert not tt._plain_eager([x, torch.ones(2, device="meta")])


def test_cuda_tensors_without_a_gpu_are_a_clear_error():
    """No GPU (or CUDA torch) here: only the routing decision is tested, on stand-ins."""
    class Stand:
        def __init__(self, dev):
            self.device = torch.device(dev)
    pytest.importorskip("numba")
    from numba import cuda
    if cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(tt.TorchDeviceError, match=r"no usable GPU; move them to the CPU with .cpu\(\)"):
        tt._on_cuda(torch.device("cuda"), "op")
    with pytest.raises(tt.TorchDeviceError, match=r"argument 1 \('b'\) is on cpu and argument 0 \('a'\) on cuda"):
        tt._one_device([("argument 0 ('a')", Stand("cuda")), ("argument 1 ('b')", Stand("cpu"))], "op")


def test_residuals_are_extra_forward_outputs_and_an_unused_input_gets_zeros():
    op = tt.custom_op(_rms_scale, name=_name("rms_res"))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    raw = op.forward_op(x, g, [True, True])
    assert len(raw) == 2 and raw[1].shape == (3,)  # y, then the saved row sum of squares
    assert [t.name for t in op._pullback([x, g]).extra] == ["ms_red1"]
    torch.testing.assert_close(raw[1], (x.detach() ** 2).sum(1))
    assert torch.autograd.gradcheck(op, (x, g))
    unused = tt.custom_op(lambda a, b: te.compute(a.shape, lambda i: a[i] * 2.0, name="u"),
                          name=_name("unused"))
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, dtype=torch.float64, requires_grad=True)
    ga, gb = torch.autograd.grad(unused(a, b).sum(), [a, b])
    torch.testing.assert_close(gb, torch.zeros(2, dtype=torch.float64))
