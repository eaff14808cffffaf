"""Tables for Relax's own ops: one sample call per tensor op, TVM's gradient conventions.

Data only (no TVM import at module level).  A `Sample` says how to build one call of
the op on Relax parameters: `build(*params)` returns the call; `args` gives each
parameter's shape, dtype and value range (`F` = the check's float dtype, float64 unless the
sample says `dtype="float32"` because TVM's legalization rejects or rounds float64).
Samples serve the inventory (does the legalization capture as pure te?), the numerical
checks through `relax.transform.Gradient` and the example tests; the derived gradients
never use them (they legalize the actual call).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

F = "float"  # placeholder for the check's float dtype


@dataclass(frozen=True)
class Arg:
    """One Relax parameter of a sample call."""

    shape: tuple[int, ...]
    dtype: str = F
    lo: float = -1.0
    hi: float = 1.0
    values: tuple[float, ...] | None = None  # fixed values (flattened) instead of random ones


@dataclass(frozen=True)
class Sample:
    """One call of a Relax op: `build(*params)` on parameters described by `args`."""

    build: Callable[..., Any]
    args: tuple[Arg, ...]
    dtype: str = "float64"  # what F means for this sample
    tol: float = 1e-6       # scale-free tolerance of the central-difference check
    note: str = ""


def f(*shape: int, lo: float = -1.0, hi: float = 1.0) -> Arg:
    return Arg(tuple(shape), F, lo, hi)


def i(*shape: int, hi: int, lo: int = 0, dtype: str = "int64") -> Arg:
    return Arg(tuple(shape), dtype, lo, hi)


def b(*shape: int) -> Arg:
    return Arg(tuple(shape), "bool", 0, 2)


# regions of interest: (batch index, x1, y1, x2, y2), boundaries away from sample points
_ROIS = Arg((2, 5), F, values=(0, 0.55, 0.7, 3.6, 4.2, 0, 1.2, 0.35, 4.9, 3.15))

F32 = {"dtype": "float32", "tol": 2e-2}  # float32 forward: looser central differences


def _var_len(seq_q: tuple = (0, 3, 7), seq_k: tuple = (0, 4, 6), **attrs: Any) -> Sample:
    """attention_var_len (q, k, v, seqstart_q/k, max_seqlen_q/k) on packed sequences."""
    ints = [Arg((len(s),) * (len(s) > 1), "int32", values=s) for s in (seq_q, seq_k, (4,), (4,))]
    return Sample(lambda q, k, v, sq, sk, mq, mk: _op("nn.attention_var_len")(
        q, k, v, sq, mq, sk, mk, **attrs), (f(1, 7, 2, 4), f(1, 6, 2, 4), f(1, 6, 2, 3), *ints))


def _r() -> Any:
    from tvm import relax
    return relax


def _op(path: str) -> Callable[..., Any]:
    """`relax.op.<path>` looked up at call time (TVM is imported lazily)."""
    def call(*a: Any, **k: Any) -> Any:
        fn: Any = _r().op
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(*a, **k)
    return call


def _dyn_slice(begin: list[int], end: list[int], strides: list[int]) -> Sample:
    """dynamic_strided_slice of a (5, 6) input with constant (int64) begin, end and strides."""
    return Sample(lambda x: _op("dynamic_strided_slice")(x, *(_r().const(v, "int64") for v in (
        begin, end, strides))), (f(5, 6),))


def _s(path: str, *args: Arg, **kw: Any) -> Sample:
    """A sample that calls `relax.op.<path>(*params)` (keyword attrs in `attrs=`)."""
    attrs = kw.pop("attrs", {})
    fn = _op(path)
    return Sample(lambda *p: fn(*p, **attrs), tuple(args), **kw)


def _tup(path: str, *args: Arg, rest: int = 0, **kw: Any) -> Sample:
    """Ops taking a tuple of tensors first (concat, stack, meshgrid, einsum ...)."""
    attrs = kw.pop("attrs", {})
    fn = _op(path)
    n = len(args) - rest
    return Sample(lambda *p: fn(_r().Tuple(list(p[:n])), *p[n:], **attrs), tuple(args), **kw)


def _prim(v: float, dtype: str = "float64") -> Any:
    import tvm
    return _r().prim_value(tvm.tirx.const(v, dtype))


_UNARY_RANGES: dict[str, tuple[float, float]] = {
    "abs": (-1, 1), "acos": (-0.9, 0.9), "acosh": (1.2, 3), "asin": (-0.9, 0.9), "asinh": (-2, 2),
    "atan": (-2, 2), "atanh": (-0.9, 0.9), "ceil": (-2, 2), "cos": (-2, 2), "cosh": (-2, 2),
    "erf": (-2, 2), "exp": (-1, 1), "floor": (-2, 2), "log": (0.2, 2), "negative": (-1, 1),
    "round": (-2, 2), "rsqrt": (0.2, 2), "sigmoid": (-2, 2), "sign": (-2, 2), "sin": (-2, 2),
    "sinh": (-2, 2), "sqrt": (0.2, 2), "square": (-2, 2), "tan": (-1, 1), "tanh": (-2, 2),
    "trunc": (-2, 2), "nn.relu": (-1, 1), "nn.relu6": (-1, 7), "nn.gelu": (-2, 2),
    "nn.gelu_tanh": (-2, 2), "nn.silu": (-2, 2), "nn.selu": (-2, 2), "nn.softplus": (-2, 2),
    "nn.leakyrelu": (-1, 1),
}
_BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "atan2", "log_add_exp"]
_COMPARE = ["equal", "not_equal", "greater", "greater_equal", "less", "less_equal"]
_BOOL_UNARY = ["isfinite", "isinf", "isnan"]


def _samples() -> dict[str, Sample]:
    s: dict[str, Sample] = {}
    for name, (lo, hi) in _UNARY_RANGES.items():
        s["relax." + name] = _s(name, f(3, 4, lo=lo, hi=hi))
    for name in _BINARY:
        s["relax." + name] = _s(name, f(3, 4), f(1, 4))
    for name in _COMPARE:
        s["relax." + name] = _s(name, f(3, 4), f(1, 4))
    for name in _BOOL_UNARY:
        s["relax." + name] = _s(name, f(3, 4))
    s.update({
        "relax.divide": _s("divide", f(3, 4), f(1, 4, lo=0.5, hi=2)),
        "relax.power": _s("power", f(3, 4, lo=0.5, hi=2), f(1, 4)),
        "relax.floor_divide": _s("floor_divide", f(3, 4, lo=-3, hi=3), f(1, 4, lo=0.5, hi=2)),
        "relax.floor_mod": _s("floor_mod", f(3, 4, lo=-3, hi=3), f(1, 4, lo=0.5, hi=2)),
        "relax.mod": _s("mod", f(3, 4, lo=-3, hi=3), f(1, 4, lo=0.5, hi=2)),
        "relax.clip": Sample(lambda x: _op("clip")(x, _prim(-0.5), _prim(0.5)), (f(3, 4),)),
        "relax.logical_not": _s("logical_not", b(3, 4)),
        "relax.logical_and": _s("logical_and", b(3, 4), b(3, 4)),
        "relax.logical_or": _s("logical_or", b(3, 4), b(3, 4)),
        "relax.logical_xor": _s("logical_xor", b(3, 4), b(3, 4)),
        "relax.bitwise_not": _s("bitwise_not", i(3, 4, hi=9)),
        "relax.bitwise_and": _s("bitwise_and", i(3, 4, hi=9), i(3, 4, hi=9)),
        "relax.bitwise_or": _s("bitwise_or", i(3, 4, hi=9), i(3, 4, hi=9)),
        "relax.bitwise_xor": _s("bitwise_xor", i(3, 4, hi=9), i(3, 4, hi=9)),
        "relax.left_shift": _s("left_shift", i(3, 4, hi=9), i(3, 4, hi=3)),
        "relax.right_shift": _s("right_shift", i(3, 4, hi=99), i(3, 4, hi=3)),
        "relax.astype": _s("astype", f(3, 4), attrs={"dtype": "float64"}, **F32),
        "relax.wrap_param": _s("wrap_param", f(3, 4), attrs={"dtype": "float64"}, **F32),
        # creation
        "relax.full": Sample(lambda v: _op("full")((2, 3), v), (f(),)),
        "relax.full_like": _s("full_like", f(2, 3), f()),
        "relax.ones": Sample(lambda: _op("ones")((2, 3), "float64"), ()),
        "relax.zeros": Sample(lambda: _op("zeros")((2, 3), "float64"), ()),
        "relax.ones_like": _s("ones_like", f(2, 3)),
        "relax.zeros_like": _s("zeros_like", f(2, 3)),
        "relax.eye": Sample(lambda: _op("eye")(3, 4, 1, "float64"), ()),
        "relax.eye_like": _s("eye_like", f(3, 4), attrs={"k": 1}),
        "relax.arange": Sample(lambda: _op("arange")(0, 6, 1, "float64"), ()),
        "relax.hamming_window": Sample(lambda: _op("hamming_window")(
            _prim(5, "int64"), _prim(1, "int64"), _prim(0.54), _prim(0.46), "float64"), ()),
        "relax.triu": _s("triu", f(4, 4), attrs={"k": 1}),
        "relax.tril": _s("tril", f(4, 4), attrs={"k": -1}),
        "relax.meshgrid": _tup("meshgrid", f(3), f(4)),
        # indexing
        "relax.take": _s("take", f(4, 5), i(3, hi=5), attrs={"axis": 1}),
        "relax.strided_slice": _s("strided_slice", f(5, 6), attrs={
            "axes": [0, 1], "begin": [1, 0], "end": [5, 6], "strides": [2, 3]}),
        "relax.dynamic_strided_slice": _dyn_slice([1, 0], [5, 6], [2, 3]),
        "relax.gather_elements": _s("gather_elements", f(3, 4), i(3, 2, hi=4), attrs={"axis": 1}),
        "relax.gather_nd": _s("gather_nd", f(3, 4), i(2, 2, hi=3)),
        "relax.index_tensor": Sample(lambda x, k: _op("index_tensor")(x, _r().Tuple([k])),
                                     (f(4, 5), i(3, hi=4))),
        "relax.index_put": Sample(lambda x, k, j, v: _op("index_put")(x, _r().Tuple([k, j]), v),
                                  (f(4, 5), i(3, hi=4), i(3, hi=5), f(3))),
        "relax.scatter_elements": _s("scatter_elements", f(3, 4), i(3, 2, hi=4), f(3, 2),
                                     attrs={"axis": 1}),
        "relax.scatter_nd": _s("scatter_nd", f(4, 5), i(2, 1, hi=4), f(2, 5)),
        "relax.slice_scatter": Sample(lambda x, v: _op("slice_scatter")(x, v, 1, 3, 1, 0),
                                      (f(4, 5), f(2, 5))),
        "relax.one_hot": Sample(lambda k: _op("one_hot")(k, _prim(1, "int64"), _prim(0, "int64"), 5),
                                (i(3, hi=5),)),
        "relax.where": _s("where", b(3, 4), f(3, 4), f(3, 4)),
        "relax.argmax": _s("argmax", f(3, 4), attrs={"axis": 1}),
        "relax.argmin": _s("argmin", f(3, 4), attrs={"axis": 1}),
        "relax.bucketize": Sample(lambda x: _op("bucketize")(
            x, _r().const([-0.5, 0.0, 0.5], "float64")), (f(3, 4),)),
        # linear algebra
        "relax.matmul": _s("matmul", f(2, 3, 4), f(4, 5)),
        "relax.outer": _s("outer", f(3), f(4)),
        "relax.einsum": _tup("einsum", f(3, 4), f(4, 5), attrs={"subscripts": "ij,jk->ik"}),
        # manipulation
        "relax.broadcast_to": _s("broadcast_to", f(1, 4), attrs={"shape": (3, 4)}),
        "relax.collapse_sum_like": _s("collapse_sum_like", f(3, 4), f(1, 4)),
        "relax.collapse_sum_to": _s("collapse_sum_to", f(3, 4), attrs={"shape": (1, 4)}),
        "relax.concat": _tup("concat", f(2, 3), f(4, 3), attrs={"axis": 0}),
        "relax.stack": _tup("stack", f(2, 3), f(2, 3), attrs={"axis": 1}),
        "relax.expand_dims": _s("expand_dims", f(3, 4), attrs={"axis": 1}),
        "relax.squeeze": _s("squeeze", f(3, 1, 4), attrs={"axis": [1]}),
        "relax.flatten": _s("flatten", f(2, 3, 4)),
        "relax.nn.batch_flatten": _s("nn.batch_flatten", f(2, 3, 4)),
        "relax.flip": _s("flip", f(3, 4), attrs={"axis": 1}),
        "relax.permute_dims": _s("permute_dims", f(2, 3, 4), attrs={"axes": [2, 0, 1]}),
        "relax.reshape": _s("reshape", f(2, 6), attrs={"shape": (3, 4)}),
        "relax.repeat": _s("repeat", f(2, 3), attrs={"repeats": 2, "axis": 1}),
        "relax.tile": _s("tile", f(2, 3), attrs={"repeats": (2, 1)}),
        "relax.split": _s("split", f(6, 3), attrs={"indices_or_sections": [2, 5], "axis": 0}),
        "relax.reverse_sequence": _s("reverse_sequence", f(3, 5), i(3, hi=6, lo=1),
                                     attrs={"seq_axis": 1, "batch_axis": 0}),
        "relax.layout_transform": _s("layout_transform", f(2, 6),
                                     attrs={"index_map": lambda a, c: (c, a)}),
        # statistics
        **{f"relax.{n}": _s(n, f(3, 4), attrs={"axis": 1}) for n in
           ("sum", "mean", "max", "min", "prod", "std", "variance", "median")},
        "relax.cumsum": _s("cumsum", f(3, 4), attrs={"axis": 1}),
        "relax.cumprod": _s("cumprod", f(3, 4), attrs={"axis": 1}),
        # sorting, sets
        "relax.sort": _s("sort", f(3, 4)),
        "relax.argsort": _s("argsort", f(3, 4)),
        "relax.topk": _s("topk", f(3, 4), attrs={"k": 2}),
        # nn
        "relax.nn.softmax": _s("nn.softmax", f(3, 4)),
        "relax.nn.log_softmax": _s("nn.log_softmax", f(3, 4)),
        "relax.nn.dropout": _s("nn.dropout", f(3, 4)),
        "relax.nn.prelu": _s("nn.prelu", f(2, 3, 4), f(3)),
        "relax.nn.pad": _s("nn.pad", f(2, 3), attrs={"pad_width": [1, 0, 0, 2]}),
        "relax.nn.pixel_shuffle": _s("nn.pixel_shuffle", f(1, 4, 2, 2), attrs={"upscale_factor": 2}),
        "relax.nn.cross_entropy_with_logits": _s("nn.cross_entropy_with_logits", f(2, 4), f(2, 4)),
        "relax.nn.nll_loss": _s("nn.nll_loss", f(3, 4), i(3, hi=4), f(4, lo=0.5, hi=2)),
        "relax.nn.conv1d": _s("nn.conv1d", f(1, 2, 7), f(3, 2, 3),
                              attrs={"strides": 2, "padding": 1}),
        "relax.nn.conv2d": _s("nn.conv2d", f(1, 2, 6, 6), f(3, 2, 3, 3),
                              attrs={"strides": 2, "padding": 1}),
        "relax.nn.conv3d": _s("nn.conv3d", f(1, 2, 4, 4, 4), f(2, 2, 3, 3, 3),
                              attrs={"padding": 1}),
        "relax.nn.conv1d_transpose": _s("nn.conv1d_transpose", f(1, 2, 4), f(2, 3, 3),
                                        attrs={"strides": 2, "padding": 1}),
        "relax.nn.conv2d_transpose": _s("nn.conv2d_transpose", f(1, 2, 3, 3), f(2, 3, 3, 3),
                                        attrs={"strides": 2, "padding": 1}),
        "relax.nn.conv3d_transpose": _s("nn.conv3d_transpose", f(1, 2, 2, 2, 2), f(2, 2, 2, 2, 2),
                                        attrs={"strides": 2}),
        "relax.nn.max_pool1d": _s("nn.max_pool1d", f(1, 2, 7), attrs={"pool_size": 3, "strides": 2}),
        "relax.nn.max_pool2d": _s("nn.max_pool2d", f(1, 2, 5, 5),
                                  attrs={"pool_size": 3, "strides": 2, "padding": 1}),
        "relax.nn.max_pool3d": _s("nn.max_pool3d", f(1, 1, 4, 4, 4), attrs={"pool_size": 2, "strides": 2}),
        "relax.nn.avg_pool1d": _s("nn.avg_pool1d", f(1, 2, 7), attrs={"pool_size": 3, "strides": 2}),
        "relax.nn.avg_pool2d": _s("nn.avg_pool2d", f(1, 2, 5, 5),
                                  attrs={"pool_size": 3, "strides": 2, "padding": 1}),
        "relax.nn.avg_pool3d": _s("nn.avg_pool3d", f(1, 1, 4, 4, 4), attrs={"pool_size": 2, "strides": 2}),
        "relax.nn.adaptive_avg_pool1d": _s("nn.adaptive_avg_pool1d", f(1, 2, 7), attrs={"output_size": 3}),
        "relax.nn.adaptive_avg_pool2d": _s("nn.adaptive_avg_pool2d", f(1, 2, 5, 5),
                                           attrs={"output_size": (2, 3)}),
        "relax.nn.adaptive_avg_pool3d": _s("nn.adaptive_avg_pool3d", f(1, 1, 4, 5, 3),
                                           attrs={"output_size": (2, 2, 2)}),
        "relax.nn.batch_norm": _s("nn.batch_norm", f(2, 3, 2, 2), f(3), f(3), f(3), f(3, lo=0.5, hi=2),
                                  attrs={"axis": 1}, **F32),
        "relax.nn.layer_norm": _s("nn.layer_norm", f(2, 3, 4), f(4), f(4), attrs={"axes": -1}, **F32),
        "relax.nn.group_norm": _s("nn.group_norm", f(2, 4, 3, 3), f(4), f(4), attrs={
            "num_groups": 2, "channel_axis": 1, "axes": [2, 3]}, **F32),
        "relax.nn.instance_norm": _s("nn.instance_norm", f(2, 3, 4, 4), f(3), f(3), attrs={
            "channel_axis": 1, "axes": [2, 3]}, **F32),
        "relax.nn.rms_norm": _s("nn.rms_norm", f(2, 3, 4), f(4), **F32),
        "relax.nn.attention": _s("nn.attention", f(1, 3, 2, 4), f(1, 5, 2, 4), f(1, 5, 2, 4)),
        "relax.nn.attention_bias": _s("nn.attention_bias", f(1, 3, 2, 4), f(1, 5, 2, 4),
                                      f(1, 5, 2, 4), f(1, 2, 3, 5)),
        "relax.nn.attention_var_len": _var_len(),
        "relax.image.resize2d": _s("image.resize2d", f(1, 2, 3, 4), attrs={"size": (5, 6)}, **F32),
        "relax.image.resize3d": _s("image.resize3d", f(1, 1, 2, 3, 3), attrs={"size": (3, 4, 4)}, **F32),
        "relax.image.grid_sample": _s("image.grid_sample", f(1, 2, 4, 4), f(1, 3, 3, 2, lo=-0.9, hi=0.9)),
        "relax.image.affine_grid": _s("image.affine_grid", f(1, 2, 3), attrs={"size": (4, 5)}),
        "relax.vision.roi_align": _s("vision.roi_align", f(1, 2, 6, 6), _ROIS, attrs={
                                         "pooled_size": (2, 2), "spatial_scale": 1.0,
                                         "sample_ratio": 2}),
        "relax.vision.roi_pool": _s("vision.roi_pool", f(1, 2, 6, 6), _ROIS,
                                    attrs={"pooled_size": (2, 2), "spatial_scale": 1.0}),
        "relax.vision.multibox_transform_loc": _s("vision.multibox_transform_loc", f(1, 3, 4),
                                                  f(1, 16), f(1, 4, 4, lo=0.1, hi=0.9)),
        "relax.vision.get_valid_counts": _s("vision.get_valid_counts", f(1, 4, 6)),
        "relax.vision.non_max_suppression": _s(
            "vision.non_max_suppression", f(1, 4, 6, lo=0, hi=1), i(1, lo=4, hi=5, dtype="int32"),
            Arg((1, 4), "int32", values=(0, 1, 2, 3)), attrs={"return_indices": False}, **F32),
        "relax.quantize": _s("quantize", f(3, 4), f(), i(hi=1, dtype="int8"),
                             attrs={"axis": 0}, **F32),
        "relax.dequantize": _s("dequantize", i(3, 4, hi=9, dtype="int8"), f(), i(hi=1, dtype="int8"),
                               attrs={"axis": 0}, **F32),
        # gradient ops
        "relax.grad.no_grad": _s("grad.no_grad", f(3, 4)),
        "relax.grad.start_checkpoint": _s("grad.start_checkpoint", f(3, 4)),
        "relax.grad.end_checkpoint": _s("grad.end_checkpoint", f(3, 4)),
        "relax.grad.avg_pool2d_backward": _s("grad.avg_pool2d_backward", f(1, 1, 2, 2),
                                             f(1, 1, 4, 4), attrs={"pool_size": (2, 2),
                                                                   "strides": (2, 2)}),
        "relax.grad.max_pool2d_backward": _s("grad.max_pool2d_backward", f(1, 1, 2, 2),
                                             f(1, 1, 4, 4), attrs={"pool_size": (2, 2),
                                                                   "strides": (2, 2)}),
        "relax.grad.nll_loss_backward": _s("grad.nll_loss_backward", f(), f(3, 4), i(3, hi=4)),
        "relax.grad.take_backward": _s("grad.take_backward", f(3, 2), f(3, 5), i(2, hi=5),
                                       attrs={"axis": 1}),
        "relax.ewise_fma": _s("ewise_fma", f(3, 4), f(3, 4), f(3, 4)),
        "relax.size": _s("size", f(3, 4)),
        "relax.multinomial_from_uniform": _s("multinomial_from_uniform", f(2, 3, lo=0.1, hi=1),
                                             f(2, 1, lo=0, hi=1), i(2, 1, hi=2)),
    })
    s["relax.nn.leakyrelu"] = _s("nn.leakyrelu", f(3, 4), attrs={"alpha": 0.1})
    s["relax.nn.softplus"] = _s("nn.softplus", f(3, 4, lo=-2, hi=2), attrs={"beta": 1.5})
    return s


SAMPLES: dict[str, Sample] = _samples()

# Further calls of ops with a hand-written gradient, keyed "op[variant]": the cases where
# TVM's own gradients were found wrong or aborting (broadcasting, last-axis take, dilation).
VARIANTS: dict[str, Sample] = {
    "relax.where[broadcast]": _s("where", b(3, 4), f(1, 4), f(3, 1)),
    "relax.take[3-d, last axis]": _s("take", f(2, 4, 5), i(2, 3, hi=5), attrs={"axis": 2}),
    "relax.nn.conv2d[dilated]": _s("nn.conv2d", f(1, 2, 7, 7), f(3, 2, 3, 3), attrs={
        "strides": 2, "padding": 1, "dilation": 2}),
    "relax.dynamic_strided_slice[negative, clamped]": _dyn_slice([4, 10], [-100, 0], [-2, -1]),
    "relax.nn.max_pool2d[dilated]": _s("nn.max_pool2d", f(1, 2, 7, 7), attrs={
        "pool_size": 3, "strides": 2, "padding": 1, "dilation": 2}),
    "relax.nn.avg_pool2d[dilated]": _s("nn.avg_pool2d", f(1, 2, 7, 7), attrs={
        "pool_size": 3, "strides": 2, "padding": 1, "dilation": 2}),
    # the ops texpr_ad defines itself (own_te.py): each path of a definition
    "relax.cumsum[exclusive]": _s("cumsum", f(3, 4), attrs={"axis": 1, "exclusive": True}),
    "relax.cumsum[flattened]": _s("cumsum", f(3, 4)),
    "relax.cumprod[exclusive, zeros]": _s("cumprod", Arg((3, 4), F, values=(
        0.5, 0, -1.5, 2, 0, 0, 1.25, -0.5, 1.5, -2, 0, 0.75)),
        attrs={"axis": 1, "exclusive": True}),
    "relax.sort[descending]": _s("sort", f(3, 4), attrs={"axis": 0, "descending": True}),
    "relax.topk[values, smallest]": _s("topk", f(3, 5), attrs={
        "k": 2, "axis": 0, "ret_type": "values", "largest": False}),
    "relax.median[all]": _s("median", f(3, 4)),
    "relax.median[keepdims]": _s("median", f(3, 4), attrs={"axis": 0, "keepdims": True}),
    "relax.scatter_elements[duplicates]": _s(
        "scatter_elements", f(3, 4), Arg((3, 3), "int64", values=(1, 1, -1, 0, 2, 0, 3, 3, 3)),
        f(3, 3), attrs={"axis": 1}),
    "relax.scatter_elements[add]": _s("scatter_elements", f(3, 4), Arg((3, 2), "int64", values=(
        1, 1, 0, -2, 3, 3)), f(3, 2), attrs={"axis": 1, "reduction": "add"}),
    "relax.scatter_nd[add, duplicates]": _s("scatter_nd", f(4, 5), Arg((3, 2), "int64", values=(
        0, 2, 3, 1, 0, 2)), f(3), attrs={"reduction": "add"}),
    "relax.scatter_nd[duplicates]": _s("scatter_nd", f(4, 5), Arg((3, 1), "int64", values=(
        2, 0, 2)), f(3, 5)),
    "relax.index_put[accumulate, broadcast]": Sample(lambda x, k, j, v: _op("index_put")(
        x, _r().Tuple([k, j]), v, accumulate=True), (
        f(4, 5), Arg((3, 1), "int64", values=(1, -1, 1)), Arg((2,), "int64", values=(0, 4)),
        f(3, 2))),
    "relax.index_put[duplicates]": Sample(lambda x, k, j, v: _op("index_put")(
        x, _r().Tuple([k, j]), v), (f(4, 5), Arg((3,), "int64", values=(1, 2, 1)),
                                   Arg((3,), "int64", values=(3, 0, 3)), f(3))),
    "relax.grad.take_backward[flattened]": _s("grad.take_backward", f(3), f(3, 5),
                                              Arg((3,), "int64", values=(4, 11, 4))),
    "relax.nn.attention_var_len[TopLeft, scale]": _var_len(causal_mask="TopLeft", scale=0.7),
    "relax.nn.attention_var_len[BottomRight, unused]": _var_len(
        (0, 2, 6), (0, 1, 5), causal_mask="BottomRight"),  # query 6 and key 5: no sequence
    "relax.layout_transform[padded]": _s("layout_transform", f(2, 6), attrs={
        "index_map": lambda a, c: (c // 4, a, c % 4), "pad_value": 0.5}),
}


def sample(key: str) -> Sample:
    """The sample of an op ("relax.exp") or of a variant ("relax.where[broadcast]")."""
    return SAMPLES[key] if key in SAMPLES else VARIANTS[key]


def op_of(key: str) -> str:
    """The op name of a sample key."""
    return key.split("[", 1)[0]

# Relax ops that are not tensor computations (calls, memory, VM, closures, distribution, ...).
INFRASTRUCTURE_PREFIXES = ("relax.call_", "relax.memory.", "relax.vm.", "relax.builtin.",
                           "relax.dist.", "relax.inspect.")
INFRASTRUCTURE = frozenset({
    "relax.assert_op", "relax.hint_on_device", "relax.invoke_closure",
    "relax.invoke_pure_closure", "relax.make_closure", "relax.null_value", "relax.print",
    "relax.shape_of", "relax.shape_to_tensor", "relax.tensor_to_shape", "relax.to_vdevice",
})

# Tensor ops for which no sample call is built, and why (they need a multi-device runtime
# or produce data-dependent shapes the check cannot drive).
NO_SAMPLE: dict[str, str] = {
    "relax.ccl.allgather": "packed function (collective communication)",
    "relax.ccl.allreduce": "packed function (collective communication)",
    "relax.ccl.broadcast_from_worker0": "packed function (collective communication)",
    "relax.ccl.scatter_from_worker0": "packed function (collective communication)",
    "relax.vision.all_class_non_max_suppression": "its legalized output has a data-dependent "
                                                  "shape, unlike its declared type",
    "relax.nonzero": "data-dependent output shape: TVM 0.27's Gradient pass cannot "
                     "differentiate past it (sum's gradient needs the shape, MatchCast aborts)",
    "relax.unique": "data-dependent output shape: TVM 0.27's Gradient pass cannot "
                    "differentiate past it (sum's gradient needs the shape, MatchCast aborts)",
}

# Ops that `api.static_strided_slices(mod)`, called before Gradient, rewrites to another op
# (whose gradient then applies), and why.
REWRITTEN: dict[str, tuple[str, str]] = {
    "relax.dynamic_strided_slice": ("relax.strided_slice", (
        "static_strided_slices(mod), called before Gradient, rewrites it to strided_slice "
        "(static shape, derived gradient) when begin/end/strides are constants; computed at run "
        "time they stay, and their output R.Tensor(ndim=n) has no shape: TVM 0.27's Gradient "
        "aborts in the gradient of the op after it (sum: 'Found null pointer node while "
        "traversing AST'; mean: \"'NoneType' object is not iterable\"); a match_cast to a shape "
        "aborts it wherever it stands ('Check failed: (var_binding) is false')")),
}

# -- TVM's gradient conventions, kept when a derived gradient replaces or joins them ----------

# Float arguments TVM declares non-differentiable: (op, argument position).
NO_GRAD_ARGS: dict[str, frozenset[int]] = {
    "relax.full_like": frozenset({1}),   # the fill value
    "relax.full": frozenset({1}),        # the fill value
    "relax.nn.nll_loss": frozenset({2}),  # the class weights
}

# The Gradient pass differentiates these itself and never asks for an FPrimalGradient.
PASS_NATIVE: dict[str, str] = {
    "relax.grad.start_checkpoint": "checkpoint marker, handled by the Gradient pass",
    "relax.grad.end_checkpoint": "checkpoint marker, handled by the Gradient pass",
}

# Ops whose gradient is zero by definition (the stop-gradient marker); integer/bool-output
# ops are zero too, found from their output dtypes.
ZERO_GRADIENT = frozenset({"relax.grad.no_grad"})

# Defects of TVM's hand-written gradients the derived ones do not reproduce.
TVM_DEFECTS: dict[str, str] = {
    "relax.cumsum[exclusive]": "TVM's gradient is the inclusive one's (a reverse inclusive cumsum "
                               "of dy); derived: sum_{i > k} dy[i]",
    "relax.triu": "TVM's gradient lists one partial for two arguments (x, k): the pass aborts "
                  "('partials number != inputs number'); derived: [dx, no_grad(k)]",
}

# Where a derived gradient may differ from TVM's hand-written one by convention (not defect).
KINK_CONVENTIONS: dict[str, str] = {
    "relax.nn.relu": "relu'(0): TVM 1, derived 0 (PyTorch, JAX)",
    "relax.abs": "abs'(0): TVM +1, derived 0",
    "relax.maximum": "ties: TVM all to the first argument, derived split half and half",
    "relax.minimum": "ties: TVM all to the first argument, derived split half and half",
    "relax.nn.max_pool2d": "window ties: TVM to the first maximum, derived split evenly",
    **{f"relax.{op}[duplicates]": "duplicate indices: only the update TVM's forward kept gets a "
       "gradient (PyTorch's scatter/index_put backward gives every duplicate the written "
       "position's)" for op in ("scatter_elements", "scatter_nd", "index_put")},
}

__all__ = ["Arg", "F", "INFRASTRUCTURE", "INFRASTRUCTURE_PREFIXES", "KINK_CONVENTIONS",
           "NO_GRAD_ARGS", "NO_SAMPLE", "PASS_NATIVE", "SAMPLES", "Sample", "TVM_DEFECTS",
           "ZERO_GRADIENT", "REWRITTEN", "VARIANTS", "op_of", "sample"]
