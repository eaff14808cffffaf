"""A PyTorch user's training loop around texpr_ad.torch ops: chains of ops under torch.compile,
outputs modified in place (`out += identity`), modules holding an op that are copied and saved.
Each test failed before its fix (found by the torch-user pass)."""
from __future__ import annotations

import contextlib
import itertools

import pytest

torch = pytest.importorskip("torch")

import texpr_ad.torch as tt  # noqa: E402
from texpr_ad import te  # noqa: E402

_ids = itertools.count()


def _name(base: str) -> str:
    return f"{base}_train_use_{next(_ids)}"


def _linear(x, w, b):
    n, k = x.shape
    r = te.reduce_axis((0, k), name="r")
    return te.compute((n, w.shape[0]), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r) + b[j],
                      name="y")


def _tanh(x):
    return te.compute(x.shape, lambda *i: te.tanh(x[i]), name="t")


def test_chain_of_ops_under_torch_compile_recompiles_for_a_new_batch_size():
    # before: the second size (automatic dynamic shapes) was Dynamo's AssertionError "Guard
    # failed on the same frame it was created" (a guard on the second op's shape memo)
    lin, th = tt.custom_op(_linear, name=_name("lin")), tt.custom_op(_tanh, name=_name("tanh"))
    w, b = torch.randn(5, 4), torch.randn(5)
    torch._dynamo.reset()
    f = torch.compile(lambda x: th(lin(x, w, b)), fullgraph=True, backend="aot_eager")
    for n in (6, 9, 11):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), torch.tanh(x @ w.T + b))


class _Observed(torch.overrides.TorchFunctionMode):
    """A mode that passes every call on: the op then goes through the dispatcher."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("observed", [False, True], ids=["fast_path", "dispatcher"])
def test_output_the_backward_does_not_read_may_be_changed_in_place(observed):
    # before: `out += identity` (a residual block) was autograd's "one of the variables needed
    # for gradient computation has been modified by an inplace operation": every output was
    # saved, though a linear layer's backward reads x and w only (torch's linear allows it)
    lin = tt.custom_op(_linear, name=_name("lin"))
    x, w, b = (torch.randn(*s, dtype=torch.float64, requires_grad=True)
               for s in ((6, 4), (4, 4), (4,)))
    grads = []
    for f in (lin, torch.nn.functional.linear):
        with _Observed() if observed and f is lin else contextlib.nullcontext():
            out = f(x, w, b)
            out += x
            out.relu_()
        grads.append(torch.autograd.grad((out ** 2).sum(), [x, w, b]))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


class _Holder(torch.nn.Module):
    """A module keeping its op as an attribute (`self.op = ...`)."""

    def __init__(self, op):
        super().__init__()
        self.op, self.w, self.b = op, torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(
            torch.zeros(3))

    def forward(self, x):
        return self.op(x, self.w, self.b)


def test_module_holding_an_op_deepcopies_and_saves(monkeypatch):
    # before: copy.deepcopy(model) (an EMA or teacher copy) and torch.save(model) were
    # "TypeError: cannot pickle '_thread._local' object" (the torch.library op handles)
    import copy
    import io
    import pickle

    model, x = _Holder(tt.custom_op(_linear, name=_name("lin"))), torch.randn(2, 4)
    twin = copy.deepcopy(model)
    assert twin.op is model.op and twin.w is not model.w
    torch.testing.assert_close(twin(x), model(x))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(x), model(x))
    data = pickle.dumps(model.op)  # a process where the op is not defined: say what to import
    monkeypatch.delitem(tt._OPS, model.op.qualname)
    with pytest.raises(tt.TorchOpError, match=f"{model.op.qualname}.*import the module"):
        pickle.loads(data)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.trace is deprecated
def test_torch_jit_trace_is_refused_naming_what_works():
    # before: PyTorch's "RuntimeError: Tracing a list of bool type is currently not supported!"
    th = tt.custom_op(_tanh, name=_name("tanh"))
    with pytest.raises(tt.TorchOpError, match="torch.jit.trace.*torch.compile or torch.export"):
        torch.jit.trace(lambda x: th(x) * 2, (torch.randn(3),))


def test_parameters_take_the_fast_path():
    # before: an nn.Parameter (the usual weight) is not of type torch.Tensor, so every training
    # call went through the dispatcher (about 1.6x the time of a step, measured on a linear op)
    lin = tt.custom_op(_linear, name=_name("lin"))
    x, w, b = torch.randn(6, 4), torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(
        torch.zeros(3))
    y = lin(x, w, b)
    assert type(y.grad_fn).__name__ == "_EagerBackward"
    (y ** 2).sum().backward()
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    (torch.nn.functional.linear(x, w2, b2) ** 2).sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
