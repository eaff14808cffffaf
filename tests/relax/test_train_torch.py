"""`train_torch`: PyTorch models trained in TVM Relax, step by step against PyTorch eager.

The models of examples/relax_train_torch.py (a small GPT with hand-written causal attention and
the same with F.scaled_dot_product_attention, Adam; a ResNet-style CNN with BatchNorm, SGD with
momentum; a U-Net-style model with GroupNorm, bilinear upsampling and skip concatenation, Adam; a
Mixer-style model with cumsum, where, clamp and logsumexp (TVM 0.27's importer lacks the `amax`
that logsumexp decomposes to: train_torch supplies it), SGD with momentum) on tiny shapes, 3
steps: loss curves, trained parameters and BatchNorm running statistics equal PyTorch's within
float32 rounding, and the first-step gradients within 1e-4 of torch.autograd's.
Each model compiles once (module fixtures); the refusals use two-layer models.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
torch = pytest.importorskip("torch")
F = torch.nn.functional

from texpr_ad.errors import TexprError  # noqa: E402
from texpr_ad.relax_bridge import TorchTrainError, train_torch  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "relax_train_torch", pathlib.Path(__file__).parents[2] / "examples" / "relax_train_torch.py")
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)  # type: ignore[union-attr]

STEPS = 3
CASES = {"gpt": lambda: ex.gpt_case(batch=2, ctx=4), "resnet": lambda: ex.resnet_case(size=4),
         "gpt-sdpa": lambda: ex.gpt_case(batch=2, ctx=4, sdpa=True),
         "unet": lambda: ex.unet_case(size=4), "mixer": lambda: ex.mixer_case(batch=3, tokens=4)}


@pytest.fixture(scope="module", params=sorted(CASES))
def trained(request):
    """(name, torch losses, tvm losses, torch's trained model, the trainer) after STEPS steps."""
    model, make_opt, inputs, targets, loss_fn = CASES[request.param]()
    want, _, model_t = ex.torch_curve(model, make_opt, inputs, targets, loss_fn, STEPS)
    got, _, trainer = ex.tvm_curve(model, make_opt, inputs, targets, loss_fn, STEPS)
    return request.param, want, got, model_t, trainer, model


def test_loss_curve_equals_pytorch(trained) -> None:
    name, want, got, *_ = trained
    np.testing.assert_allclose(got, want, rtol=2e-5, err_msg=name)
    assert got[-1] < got[0]  # it trains


def test_first_step_gradients_equal_torch_autograd(trained) -> None:
    name, _, _, _, trainer, model = trained
    assert set(trainer.gradient_errors) == {k for k, _ in model.named_parameters()}
    assert max(trainer.gradient_errors.values()) < 1e-4, trainer.gradient_errors


def test_trained_state_equals_pytorch(trained) -> None:
    """Parameters and buffers after STEPS steps; BatchNorm statistics are updated every step
    (TVM 0.27's importer alone returns zeros for them)."""
    name, _, _, model_t, trainer, model = trained
    got, want = trainer.state_dict(), model_t.state_dict()
    assert set(got) == set(want)
    for k, w in want.items():
        np.testing.assert_allclose(got[k].numpy(), w.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    if name == "resnet":
        assert int(got["bn1.num_batches_tracked"]) == STEPS
        start = model.state_dict()["bn1.running_var"].numpy()
        assert not np.allclose(got["bn1.running_var"].numpy(), start)
        model.load_state_dict(got)  # what a user does with the result


def test_report_attributes(trained) -> None:
    name, _, _, _, trainer, _ = trained
    assert sum(trainer.ops.values()) > 20 and trainer.compile_seconds > 0
    needed = {"gpt": {"relax.nn.gelu", "relax.nn.layer_norm"}, "resnet": {"relax.rsqrt"},
              "gpt-sdpa": {"relax.nn.gelu", "relax.nn.layer_norm"},
              "unet": {"relax.nn.group_norm", "relax.image.resize2d"},
              "mixer": {"relax.clip", "relax.max"}}[name]
    assert needed <= set(trainer.derived_ops)  # TVM 0.27 has no gradient of its own for these


class _Tiny(torch.nn.Module):
    def __init__(self, norm: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.fc = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4) if norm else torch.nn.Identity()

    def forward(self, x):
        return self.bn(self.fc(x))


@pytest.mark.parametrize("norm, loss_fn, op", [
    (False, lambda y, t: F.cross_entropy(y, t, label_smoothing=0.2), "aten.cross_entropy_loss"),
    (True, F.cross_entropy, "aten.batch_norm"),
])
def test_importer_miscomputation_is_refused_naming_the_op(norm, loss_fn, op) -> None:
    """Without decompositions TVM 0.27's importer ignores label_smoothing and reads batch_norm's
    eps as 0.1: the forward check refuses, naming the op."""
    model = _Tiny(norm)
    x, t = torch.randn(5, 3), torch.tensor([0, 3, 1, 1, 2])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TorchTrainError, match=rf"disagrees with PyTorch on output 'loss', first "
                       rf"at op {op}") as e:
        train_torch(model, x, loss_fn, opt, example_targets=t, decompose=False)
    assert isinstance(e.value, TexprError)
    # the default (decomposed) import computes it right; fc.bias before BatchNorm has a zero
    # gradient in exact arithmetic: its error is rounding noise against 1e-3 of the largest
    trainer = train_torch(model, x, loss_fn, opt, example_targets=t)
    assert max(trainer.gradient_errors.values()) < 1e-3, trainer.gradient_errors


def test_unsupported_optimizer_is_refused_before_compiling() -> None:
    model = _Tiny(False)
    with pytest.raises(TorchTrainError, match="no TVM optimizer matches RMSprop"):
        train_torch(model, torch.randn(2, 3), F.cross_entropy,
                    torch.optim.RMSprop(model.parameters()), example_targets=torch.tensor([0, 1]))
    with pytest.raises(TorchTrainError, match="model must be a torch.nn.Module"):
        train_torch(lambda x: x, torch.randn(2, 3), F.cross_entropy,
                    torch.optim.SGD(model.parameters(), lr=1.0))


class _Gated(torch.nn.Module):
    """A parameter read only in a condition (and one not read at all): PyTorch leaves their
    .grad None, which means a zero gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.fc = torch.nn.Linear(3, 4)
        self.gate = torch.nn.Parameter(torch.randn(4))
        self.unused = torch.nn.Parameter(torch.randn(2))

    def forward(self, x):
        y = self.fc(x)
        return torch.where(self.gate > 0, y, -y)


def test_parameters_without_a_torch_gradient_compare_as_zero() -> None:
    model = _Gated()
    x, t = torch.randn(5, 3), torch.tensor([0, 3, 1, 1, 2])
    trainer = train_torch(model, x, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                          example_targets=t)
    errors = trainer.gradient_errors
    assert {"gate", "unused"} <= set(errors) and max(errors.values()) < 1e-4, errors
