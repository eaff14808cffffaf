"""TVM Relax bridge: texpr_ad operators as `call_tir_with_grad` with derived gradients.

Optional: imports `tvm` lazily; nothing else in texpr_ad imports this package.

    from texpr_ad.relax_bridge import call_te_with_auto_grad, prepare_for_build
    y = bb.emit(call_te_with_auto_grad(bb, my_op, x, w, stride=2))
    mod = relax.transform.Gradient("main")(bb.get())
    ex = tvm.compile(prepare_for_build(mod), target="llvm")
"""
from .api import call_te_with_auto_grad, prepare_for_build, static_strided_slices
from .check import check_op
from .from_tvm import FromTVM, from_tvm
from .grad import BridgeError, register
from .relax_ops import Summary, register_missing_gradients, right_stock_gradients
from .te_gradient import te_gradient
from .train_torch import TorchTrainError, TorchTrainer, train_torch
from .to_tvm import TranslationError, build, prim_func, translate

__all__ = ["BridgeError", "FromTVM", "Summary", "TranslationError", "build",
           "call_te_with_auto_grad", "check_op", "from_tvm", "prepare_for_build", "prim_func",
           "register", "register_missing_gradients", "right_stock_gradients",
           "static_strided_slices", "te_gradient",
           "TorchTrainError", "TorchTrainer", "train_torch", "translate"]
