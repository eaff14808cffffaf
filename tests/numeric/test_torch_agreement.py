"""Derived adjoints (compiled CPU kernels) against PyTorch autograd, for every registry operator
with a torch reference (texpr_ad/report/torch_refs.py); skipped without torch."""
import pytest

torch = pytest.importorskip("torch")

from texpr_ad.ops import get  # noqa: E402
from texpr_ad.report.columns import OpRun  # noqa: E402
from texpr_ad.report.torch_refs import TORCH_REFS  # noqa: E402


@pytest.mark.parametrize("name", sorted(TORCH_REFS))
def test_gradient_matches_torch_autograd(name):
    agree, _ = OpRun(get(name)).torch
    assert agree.status in ("ok", "nondiff"), f"{name}: {agree.detail}"


def test_torch_references_cover_the_core_operators():
    core = {"dense", "conv2d", "conv2d_strided", "softmax", "log_softmax", "layer_norm",
            "batch_norm_train", "max_pool2d", "avg_pool2d_pad_incl", "take", "cross_entropy",
            "scaled_dot_product_attention", "gelu_erf", "prod_with_zero", "logsumexp"}
    assert core <= set(TORCH_REFS), sorted(core - set(TORCH_REFS))
