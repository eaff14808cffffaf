"""PyTorch versions of registry operators, for the coverage report's torch column.

`TORCH_REFS[name](*tensors) -> list[torch.Tensor]` builds the same computation
as the registry entry `name` from its sample arrays (as float64 / int64 torch
tensors, in the sample's input order), written directly against torch.nn.functional
with the parameters stated in the entry's notes.  The report compares torch
autograd's gradient with the derived adjoint, and first checks each reference's
forward against the entry's NumPy reference, so a wrong reference shows up as
such instead of as a gradient failure.

torch is imported only by the functions here (it is optional).
"""
from __future__ import annotations

from typing import Any, Callable

Ref = Callable[..., list[Any]]


def _t() -> Any:
    import torch
    return torch


def _F() -> Any:
    import torch.nn.functional as F
    return F


def _unary(fn_name: str, **kw: Any) -> Ref:
    return lambda x: [getattr(_F(), fn_name)(x, **kw)]


def _torch_unary(fn_name: str) -> Ref:
    return lambda x: [getattr(_t(), fn_name)(x)]


def _binary(fn_name: str) -> Ref:
    return lambda a, b: [getattr(_t(), fn_name)(a, b)]


def _conv(**kw: Any) -> Ref:
    def f(x: Any, w: Any) -> list[Any]:
        conv = {3: _F().conv1d, 4: _F().conv2d, 5: _F().conv3d}[x.ndim]
        return [conv(x, w, **kw)]
    return f


def _sdpa(q: Any, k: Any, v: Any) -> list[Any]:
    s = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
    return [_t().softmax(s, -1) @ v]


def _batch_norm_train(x: Any, g: Any, b: Any) -> list[Any]:
    return [_F().batch_norm(x, None, None, g, b, training=True, eps=1e-5)]


def _batch_norm_infer(x: Any, g: Any, b: Any, m: Any, v: Any) -> list[Any]:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [(x - m.reshape(shape)) / _t().sqrt(v.reshape(shape) + 1e-5) * g.reshape(shape)
            + b.reshape(shape)]


def _rms_norm(x: Any, g: Any) -> list[Any]:
    return [x * _t().rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * g]


TORCH_REFS: dict[str, Ref] = {
    # normalization
    "batch_norm_train": _batch_norm_train,
    "batch_norm_infer": _batch_norm_infer,
    "group_norm": lambda x, g, b: [_F().group_norm(x, 2, g, b, eps=1e-5)],
    "rms_norm": _rms_norm,
    "bias_add": lambda x, b: [x + b.reshape(1, -1, 1)],
    "conv2d_depthwise": lambda x, w: [_F().conv2d(x, w.reshape(-1, 1, *w.shape[2:]), padding=1,
                                                  groups=x.shape[1])],
    "transpose": lambda x: [x.permute(2, 0, 1)],
    "concatenate": lambda a, b, c: [_t().cat([a, b, c], 1)],
    "strided_slice": lambda x: [x[0:6:2, 1:7:3].flip(2)],

    # L1 unary
    "log": _torch_unary("log"),
    "sqrt": _torch_unary("sqrt"),
    "rsqrt": _torch_unary("rsqrt"),
    "exp": _torch_unary("exp"),
    "sigmoid": _torch_unary("sigmoid"),
    "tanh": _torch_unary("tanh"),
    "erf": _torch_unary("erf"),
    "negative": _torch_unary("neg"),
    "abs": _torch_unary("abs"),
    "relu": _unary("relu"),
    "leaky_relu": _unary("leaky_relu", negative_slope=0.1),
    "elu": _unary("elu", alpha=1.5),
    "gelu_erf": _unary("gelu"),
    "gelu_tanh": _unary("gelu", approximate="tanh"),
    "silu": _unary("silu"),
    "softplus": _unary("softplus"),
    "floor": _torch_unary("floor"),
    "ceil": _torch_unary("ceil"),
    "trunc": _torch_unary("trunc"),
    "round": _torch_unary("round"),
    "sign": _torch_unary("sign"),
    # L1 binary (broadcasting)
    "add": _binary("add"),
    "subtract": _binary("sub"),
    "multiply": _binary("mul"),
    "divide": _binary("div"),
    "floor_mod": _binary("remainder"),
    "power": _binary("pow"),
    "maximum": _binary("maximum"),
    "minimum": _binary("minimum"),
    "where": lambda c, x, y: [_t().where(c, x, y)],
    "clip": lambda x: [_t().clamp(x, -1.0, 1.0)],
    "prelu": lambda x, a: [_F().prelu(x, a)],
    "softmax": lambda x: [_t().softmax(x, 1)],
    "log_softmax": lambda x: [_t().log_softmax(x, -1)],
    "layer_norm": lambda x, g, b: [_F().layer_norm(x, g.shape, g, b, 1e-5)],
    # L2
    "dense": lambda x, w: [_F().linear(x, w)],
    "matmul": lambda a, b: [a @ b],
    "batch_matmul": lambda x, y: [x @ y.transpose(1, 2)],
    "einsum_ij_jk": lambda a, b: [_t().einsum("ij,jk->ik", a, b)],
    "einsum_bij_bjk": lambda a, b: [_t().einsum("bij,bjk->bik", a, b)],
    "einsum_i_i": lambda a, b: [_t().einsum("i,i->", a, b)],
    "conv1d": _conv(padding=1),
    "conv2d": _conv(),
    "conv2d_strided": _conv(stride=2, padding=1),
    "conv2d_dilated": _conv(dilation=2, padding=1),
    "conv2d_grouped": _conv(padding=1, groups=2),
    "conv3d": _conv(padding=1),
    "conv2d_transpose": lambda x, w: [_F().conv_transpose2d(x, w, stride=2, padding=1,
                                                            output_padding=1)],
    "max_pool1d": lambda x: [_F().max_pool1d(x, 3, 2, 1)],
    "max_pool2d": lambda x: [_F().max_pool2d(x, 3, 2, 1)],
    "max_pool3d": lambda x: [_F().max_pool3d(x, 2, 2, 0)],
    "avg_pool2d_pad_incl": lambda x: [_F().avg_pool2d(x, 3, 2, 1, count_include_pad=True)],
    "avg_pool2d_pad_excl": lambda x: [_F().avg_pool2d(x, 3, 2, 1, count_include_pad=False)],
    "global_avg_pool2d": lambda x: [_F().adaptive_avg_pool2d(x, 1)],
    "adaptive_avg_pool2d": lambda x: [_F().adaptive_avg_pool2d(x, (3, 2))],
    "upsampling_bilinear": lambda x: [_F().interpolate(x, scale_factor=2, mode="bilinear",
                                                        align_corners=False)],
    "flatten": lambda x: [_t().flatten(x, 1)],
    "pad_reflect": lambda x: [_reflect_pad(x)],
    # L3 / L4
    "take": lambda a, idx: [a[idx.long()]],
    "gather_elements": lambda d, idx: [_t().gather(d, 1, idx)],
    "sum": lambda x: [x.sum(dim=(0, 2))],
    "max": lambda x: [_t().amax(x, 1)],
    "min": lambda x: [_t().amin(x, 2, keepdim=True)],
    "mean": lambda x: [x.mean(1, keepdim=True)],
    "prod": lambda x: [x.prod(1)],
    "prod_with_zero": lambda x: [x.prod(1)],
    "variance": lambda x: [x.var(1, unbiased=False)],
    "std": lambda x: [x.std(dim=(1, 2), unbiased=False)],
    "logsumexp": lambda x: [_t().logsumexp(x, 1)],
    "cumsum": lambda x: [_t().cumsum(x, 1)],
    "pixel_shuffle": lambda x: [_F().pixel_shuffle(x, 2)],
    # losses
    "nll_loss": lambda lp, t: [_F().nll_loss(lp, t)],
    "cross_entropy": lambda x, t: [_F().cross_entropy(x, t)],
    "mse_loss": lambda p, t: [_F().mse_loss(p, t)],
    "scaled_dot_product_attention": _sdpa,
}


def _reflect_pad(x: Any) -> Any:
    """np.pad(x, [(1, 0), (0, 2), (2, 3)], mode="reflect") on a 3-D tensor."""
    F = _F()
    y = F.pad(x[None], (2, 3, 0, 2), mode="reflect")[0]          # last two axes
    return F.pad(y.permute(1, 2, 0), (1, 0), mode="reflect").permute(2, 0, 1)


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
