"""The PyTorch examples run: examples/torch_fused_layer.py trains, and
examples/torch_attention_alibi.py's derived gradient agrees with PyTorch autograd."""
import pathlib
import runpy

import pytest

pytest.importorskip("torch")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _main(name: str):
    return runpy.run_path(str(EXAMPLES / name), run_name="example")["main"]


def test_fused_layer_trains_and_matches_torch_autograd():
    res = _main("torch_fused_layer.py")(steps=30)
    assert res["last_loss"] < 0.3 * res["first_loss"], res
    assert res["grad_vs_torch"] < 1e-10 and res["gradcheck"] == 1.0, res


def test_alibi_attention_gradient_matches_torch_autograd_of_the_reference():
    res = _main("torch_attention_alibi.py")()
    assert res.pop("gradcheck") == 1.0
    assert max(res.values()) < 1e-12, res
