"""Train a PyTorch `nn.Module` in TVM Relax, checked against PyTorch.

    from texpr_ad.relax_bridge import train_torch
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = train_torch(model, (x,), F.cross_entropy, opt, example_targets=(y,))
    print(trainer.gradient_errors)          # worst relative error per parameter vs torch.autograd
    for x, y in batches:
        loss = trainer.step((x,), (y,))
    model.load_state_dict(trainer.state_dict())

`train_torch` exports `loss_fn(model(*inputs), *targets)` with `torch.export` as one function of
(inputs, targets, parameters, buffers) returning (loss, updated buffers), so BatchNorm running
statistics are computed in the graph and fed back each step.  It runs PyTorch's decompositions
(TVM 0.27's importer miscomputes `aten.batch_norm` and `aten.cross_entropy_loss` as they are, and
returns zeros for a functional batch norm's new statistics), keeps detach and torch.no_grad() as
stop-gradients, refuses by name the ops the importer cannot convert and random ops, imports the
program with `from_exported_program` (adding the `amax`, `amin`, `min(dim)` and `prod(dim)` it
lacks; matmul and conv in their inputs' dtype), gives constant dynamic slices a shape
(`static_strided_slices`), registers the gradients TVM lacks (`register_missing_gradients`),
differentiates it with `relax.transform.Gradient`, and compiles it with the step of TVM's own
optimizer (`relax.training.optimizer`: SGD, MomentumSGD, Adam) matching the `torch.optim` one.
Before returning, the imported forward (loss and new buffers) and the first-step gradients are
compared with PyTorch on the example batch; a disagreeing forward is refused with a
`TorchTrainError` naming the first disagreeing op.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import time
from collections import Counter
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .grad import BridgeError

FORWARD_RTOL = 1e-4   # max |tvm - torch| / max(|torch|, 1), float32 forward
GRAD_RTOL = 1e-3      # max |tvm - torch| / max |torch| per parameter, where
ZERO_GRAD = 1e-3      # max |torch| is at least ZERO_GRAD * the model's largest gradient: a gradient
#                       zero in exact arithmetic (a bias before BatchNorm) is rounding noise


class TorchTrainError(BridgeError):
    """`train_torch` cannot train this model faithfully (the message says where and what to do)."""


def _optimizer(opt: Any) -> Any:
    """TVM's optimizer with the hyperparameters of the `torch.optim` optimizer `opt`."""
    import torch
    from tvm.relax.training import optimizer as topt
    name = type(opt).__name__
    groups = getattr(opt, "param_groups", None) or []
    if not isinstance(opt, torch.optim.Optimizer) or len(groups) != 1:
        raise TorchTrainError(f"train_torch: optimizer= takes a torch.optim.SGD or Adam over the "
                              f"model's parameters (one parameter group), got {name}")
    g = groups[0]
    if g.get("maximize") or g.get("amsgrad") or g.get("foreach") or g.get("differentiable"):
        raise TorchTrainError(f"train_torch: {name} with maximize/amsgrad/foreach/differentiable "
                              "has no TVM counterpart; leave those options at their defaults")
    if isinstance(opt, torch.optim.SGD) and not g["momentum"]:
        return topt.SGD(g["lr"], g["weight_decay"])
    if isinstance(opt, torch.optim.SGD) and not g["dampening"]:
        return topt.MomentumSGD(g["lr"], g["momentum"], 0.0, g["weight_decay"], g["nesterov"])
    if type(opt) is torch.optim.Adam:
        return topt.Adam(g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"])
    what = f"{name} with dampening={g['dampening']}" if "dampening" in g else name
    raise TorchTrainError(f"train_torch: no TVM optimizer matches {what}; use torch.optim.SGD "
                          "(momentum without dampening) or torch.optim.Adam")


def _hyper(opt: Any) -> dict[str, Any]:
    """The hyperparameters of `opt` (one parameter group) that select and build TVM's optimizer."""
    g = opt.param_groups[0]
    return {k: g[k] for k in ("lr", "momentum", "dampening", "nesterov", "weight_decay", "betas",
                              "eps") if k in g}


def _init(opt: Any, params: list[Any]) -> Any:
    """`opt.init(params)`, its dtype a string: TVM 0.27 keeps a PrimType there, which NumPy 2
    refuses when Adam and MomentumSGD build their state."""
    set_params = opt._set_params_and_dtype

    def set_str(ps: list[Any]) -> None:
        set_params(ps)
        opt.dtype = str(opt.dtype.dtype)

    opt._set_params_and_dtype = set_str
    return opt.init(params)


def trained(model: Any, opt: Any) -> list[str]:
    """The names of the parameters of `model` that `opt` updates (with requires_grad), as
    PyTorch trains them: those it does not hold stay as they are."""
    held = {id(p) for p in opt.param_groups[0]["params"]}
    named = dict(model.named_parameters())
    if held - {id(p) for p in named.values()}:
        raise TorchTrainError("train_torch: the optimizer holds tensors that are not parameters "
                              "of the model; give it model.parameters() or some of them")
    return [k for k, p in named.items() if p.requires_grad and id(p) in held]


def _decompositions(wide: bool = False) -> dict[Any, Any]:
    """torch.export's default table, plus batch norm in training mode (the importer returns zeros
    for its new running statistics), elu (the importer drops its scale and input_scale: selu,
    celu) and var_mean (which the importer lacks) as var and mean; less detach, which it turns into
    an alias (the stop-gradient lost).  `wide` (a model not in float16/32) adds the norms TVM 0.27
    legalizes in float16/32 only (NARROW_NORMS)."""
    import torch
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    table = torch.export.default_decompositions()
    table.pop(aten.detach.default, None)
    table.update(get_decompositions([aten._native_batch_norm_legit_functional, aten.elu,
                                     *(getattr(aten, n) for n in NARROW_NORMS if wide)]))

    def var_mean(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
        return (aten.var.correction(x, dim, correction=correction, keepdim=keepdim),
                aten.mean.dim(x, dim, keepdim))

    table[aten.var_mean.correction] = var_mean
    return table


NARROW_NORMS = ("native_layer_norm", "native_group_norm", "_native_batch_norm_legit")  # instance


def _reduce(op: Any, arg: bool = False) -> Any:
    """A converter of `aten.amax`/`amin`/`prod.dim_int` (TVM 0.27's importer lacks them; torch's
    logsumexp decomposes to amax) as Relax's max/min/prod, or with `arg`, `aten.min.dim` as
    (min, argmin) like the importer's max.dim."""
    from tvm import relax

    def convert(node: Any, imp: Any) -> Any:
        x, dims, keep = [*node.args, [], False][:3]
        x, dims, emit = imp.env[x], [dims] if isinstance(dims, int) else list(dims), \
            imp.block_builder.emit
        if not arg:
            return emit(op(x, dims or None, bool(keep)))
        return emit(relax.Tuple([emit(op(x, dims, bool(keep))),
                                 emit(relax.op.argmin(x, dims[0], bool(keep)))]))

    return convert


def _embedding(node: Any, imp: Any) -> Any:
    """`aten.embedding` as the importer's take, with the rows read at padding_idx in no_grad: the
    importer drops padding_idx (only PyTorch's backward uses it: that row's gradient is 0)."""
    from tvm import relax
    w, idx = node.args[:2]
    pad, freq = (*node.args[2:], *(-1, False)[len(node.args) - 2:])[:2]
    if freq:
        raise TorchTrainError("train_torch: embedding's scale_grad_by_freq=True is not supported")
    out, i = imp._embedding_impl(imp.env[idx], imp.env[w]), imp.env[idx]
    if pad < 0:
        return out
    keep = relax.op.expand_dims(relax.op.not_equal(i, relax.const(pad, str(i.ty.dtype))), -1)
    return imp.block_builder.emit(relax.op.where(keep, out, relax.op.grad.no_grad(out)))


def _select(node: Any, imp: Any) -> Any:
    """`aten.select` (x[:, 0], unbind) as a slice, not the importer's take with a 0-d index:
    TVM 0.27's take gradient then emits a take_backward whose legalization asserts 1-d indices."""
    from tvm import relax
    x = imp.env[node.args[0]]
    dim = node.args[1] % x.ty.ndim
    i = node.args[2] % int(x.ty.shape[dim])
    sl = imp.block_builder.emit(relax.op.strided_slice(x, [dim], [i], [i + 1]))
    return imp.block_builder.emit(relax.op.squeeze(sl, [dim]))


def _detach(node: Any, imp: Any) -> Any:
    """`aten.detach` as Relax's stop-gradient (the importer's is the identity: `x.detach()` in a
    model or loss was differentiated through)."""
    from tvm import relax
    return imp.block_builder.emit(relax.op.grad.no_grad(imp.env[node.args[0]]))


def _cat(node: Any, imp: Any) -> Any:
    """`aten.cat` of one tensor as that tensor (nn.LSTM over one step exports it): TVM 0.27's
    concat gradient gives a tensor where Gradient wants a tuple ('Expected nested to match
    tuple')."""
    return imp.env[node.args[0][0]] if len(node.args[0]) == 1 else imp._cat(node)


def _pool(method: str) -> Any:
    """The importer's max pool converter `method` with an empty stride written out as PyTorch
    reads it, the kernel size (`F.max_pool2d(x, 2, ceil_mode=True)` exports `[]`, which TVM
    0.27's op rejects)."""

    def convert(node: Any, imp: Any) -> Any:
        if len(node.args) > 2 and not node.args[2]:
            node.args = (*node.args[:2], node.args[1], *node.args[3:])  # the same op in PyTorch
        return getattr(imp, method)(node)

    return convert


MAX_POOLS = ("max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool3d",
             "max_pool3d_with_indices")


def _convert() -> dict[str, Any]:
    from tvm.relax import op
    pools = {f"{k}.default": _pool(f"_{k}") for k in MAX_POOLS}
    return {"amax.default": _reduce(op.max), "amin.default": _reduce(op.min),
            "min.dim": _reduce(op.min, True), "prod.dim_int": _reduce(op.prod),
            "embedding.default": _embedding, "select.int": _select, "detach.default": _detach,
            "cat.default": _cat, **pools}


PRODUCTS = {"linear_algebra": ("matmul",), "nn": (
    "conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose")}


def _in_input_dtype(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` (a Relax op taking `out_dtype`) with out_dtype 'float32' read as its input's dtype."""
    sig = inspect.signature(f)

    @functools.wraps(f)
    def op(*args: Any, **kwargs: Any) -> Any:
        b = sig.bind(*args, **kwargs)
        dtype = getattr(getattr(b.args[0], "ty", None), "dtype", None)
        if b.arguments.get("out_dtype") == "float32" and dtype is not None:
            b.arguments["out_dtype"] = str(dtype)
        return f(*b.args, **b.kwargs)

    return op


@contextlib.contextmanager
def products_in_input_dtype() -> Iterator[None]:
    """While importing: TVM 0.27's importer asks matmul, linear and conv for out_dtype='float32'
    whatever their inputs' dtype (a float64 model failed with 'Binary operators must have the same
    datatype'); they compute in the inputs' dtype, as PyTorch's do."""
    saved = [(m, n, getattr(m, n)) for k, names in PRODUCTS.items()
             for m in [importlib.import_module(f"tvm.relax.op.{k}")] for n in names]
    try:
        for m, n, f in saved:
            setattr(m, n, _in_input_dtype(f))
        yield
    finally:
        for m, n, f in saved:
            setattr(m, n, f)


HINTS = {"scatter_add.default": "a one-hot matmul: F.one_hot(index, n).to(x.dtype) and @",
         "logcumsumexp.default": "m + log(cumsum(exp(x - m), dim)), m = x.amax(dim, True).detach()",
         "adaptive_max_pool2d.default": "F.max_pool2d with kernel_size = stride = size // output",
         "_embedding_bag_forward_only.default": "nn.Embedding and a sum or mean over each bag",
         "embedding_renorm.default": "nn.Embedding without max_norm (renormalize its weight "
                                     "between steps)"}


def _where(node: Any) -> str:
    """', at file:line: code', the model's source line that made `node` (its export trace)."""
    import re
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)',
                        node.meta.get("stack_trace") or "")
    user = [f for f in frames if "/torch/" not in f[0] and not f[0].endswith("train_torch.py")]
    return f", at {user[-1][0]}:{user[-1][1]}: {user[-1][2].strip()}" if user else ""


def check_importable(ep: Any) -> None:
    """Refuse, by name, the ops of `ep` TVM 0.27's importer cannot convert (its own check is a bare
    AssertionError 'Unsupported function types'): one per op, at the model's source line; and
    random ops (dropout in train mode, randn_like), which TVM cannot draw as PyTorch does."""
    import torch
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter
    for n in ep.graph.nodes:
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            raise TorchTrainError(
                f"train_torch: {n.target} (node {n.name!r}{_where(n)}) draws random numbers, which "
                "TVM cannot draw as PyTorch does (its dropout is the identity): train dropout with "
                "p=0 or in model.eval(), and pass other noise in as an input")
    known = {*ExportedProgramImporter().convert_map, *_convert()}
    first: dict[str, Any] = {}
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target.__name__ not in known:
            first.setdefault(n.target.__name__, n)
    if first:
        ops = "; ".join(f"{n.target} (node {n.name!r}{_where(n)})" + (
            f": rewrite it as {HINTS[k]}" if k in HINTS else "") for k, n in first.items())
        raise TorchTrainError(
            f"train_torch: TVM 0.27's importer has no converter for {ops}. Write the model with "
            "ops the importer supports; train_torch converts aten." + ", aten.".join(_convert())
            + " itself")



def detach_no_grad(ep: Any) -> Any:
    """`ep` with the outputs of its `torch.no_grad()` blocks detached: decomposing inlines a block
    (wrap_with_set_grad_enabled) and loses that it computes no gradient."""
    import torch
    g = ep.graph
    for n in list(g.nodes):
        if n.target is torch.ops.higher_order.wrap_with_set_grad_enabled and not n.args[0]:
            for u in list(n.users):  # getitem of each output
                with g.inserting_after(u):
                    d = g.call_function(torch.ops.aten.detach.default, (u,))
                d.meta = dict(u.meta)
                u.replace_all_uses_with(d, delete_user_cb=lambda x, d=d: x is not d)
    ep.graph_module.recompile()
    return ep


def export(step: Any, args: tuple[Any, ...]) -> Any:
    """torch.export of the step; a value it cannot trace (data-dependent) and a loss that is not a
    float scalar (TVM's Gradient aborts on it) are raised as TorchTrainErrors, the model's own
    errors as they are."""
    import torch
    try:
        ep = torch.export.export(step, args)
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds; keep the first line
        if "data-dependent" not in str(e):
            raise
        raise TorchTrainError(
            f"train_torch: torch.export cannot trace loss_fn(model(*inputs), *targets): "
            f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]} (a Python "
            "number read from a tensor, as .item(), float(t) or BatchNorm(momentum=None) do, or "
            "a branch on tensor values cannot be traced: write it with tensor ops)") from e
    loss = next(n for n in ep.graph.nodes if n.op == "output").args[0][0].meta["val"]
    if loss.ndim or not loss.is_floating_point():
        raise TorchTrainError(f"train_torch: loss_fn must return a float scalar (0-d), got dtype "
                              f"{str(loss.dtype).removeprefix('torch.')} and shape "
                              f"{tuple(loss.shape)}: reduce it to one float (.mean(), .sum())")
    return ep


def drop_asserts(ep: Any) -> Any:
    """`ep` without its `_assert_async` checks (F.one_hot's class range) and what only they read:
    with one, TVM 0.27's importer makes an impure function without a dataflow block, which
    Gradient rejects ('now only support one dataflow block')."""
    g = ep.graph
    for n in [n for n in g.nodes if str(n.target).startswith("aten._assert_async")]:
        g.erase_node(n)
    g.eliminate_dead_code()
    ep.graph_module.recompile()
    return ep


def import_program(ep: Any, bind_tuple: bool = False) -> tuple[Any, Any]:
    """(the importer, `ep` imported by TVM 0.27's importer with train_torch's converters, returning
    a tuple even of one); an importer failure names the op it failed on and the model's line."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter
    imp = None
    try:
        with products_in_input_dtype():  # also while the importer binds its converters
            imp = ExportedProgramImporter()
            return imp, imp.from_exported_program(ep, False, False, not bind_tuple, _convert())
    except Exception as e:  # noqa: BLE001 - TVM's converters raise anything; say where
        n = next((n for n in ep.graph.nodes if n.op == "call_function" and imp is not None
                  and n not in imp.env), None)
        at = f"{n.target} (node {n.name!r}{_where(n)})" if n is not None else "the program"
        msg = (str(e).strip().splitlines() or [""])[-1][:200]
        raise TorchTrainError(f"train_torch: TVM 0.27's importer fails on {at}: "
                              f"{type(e).__name__}: {msg}. Rewrite that op in other ops") from e


class _Step:
    """`(*inputs, *targets, *params, *buffers) -> (loss, *new buffers)` of a model and a loss."""

    def __init__(self, model: Any, loss_fn: Callable[..., Any], n_in: int, params: list[str],
                 buffers: list[str]) -> None:
        self.model, self.loss_fn, self.n_in = model, loss_fn, n_in
        self.params, self.buffers = params, buffers

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        import torch
        n, p = self.n_in, len(self.params)
        cut = len(args) - p - len(self.buffers)
        data, state = args[:cut], args[cut:]
        bufs = {k: b.clone() for k, b in zip(self.buffers, state[p:])}  # updated in place by BN
        out = torch.func.functional_call(self.model, {**dict(zip(self.params, state[:p])), **bufs},
                                         tuple(data[:n]))
        return (self.loss_fn(out, *data[n:]), *bufs.values())

    def module(self) -> Any:
        import torch
        step = self

        class Step(torch.nn.Module):  # holds no parameters: they are all inputs
            def forward(self, *args: Any) -> tuple[Any, ...]:
                return step(*args)

        return Step()


def _wide(args: Sequence[Any]) -> bool:
    """Whether a float tensor of `args` is wider than float32 (a float64 model)."""
    return any(a.is_floating_point() and a.element_size() > 4 for a in args)


def _tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _rel(got: np.ndarray, want: np.ndarray, floor: float) -> float:
    want = np.asarray(want, dtype=np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max(initial=0.0)
                 / max(float(np.abs(want).max(initial=0.0)), floor))


class TorchTrainer:
    """A compiled Relax training step of a PyTorch model (made by `train_torch`).

    `step(inputs, targets)` runs forward, backward and the optimizer update in TVM and returns the
    loss; parameters, buffers (BatchNorm statistics) and the optimizer state stay in TVM.
    `state_dict()` gives them back as torch tensors (`model.load_state_dict(...)`).
    Attributes: `ops` (Relax op counts of the imported forward), `derived_ops` (ops whose gradient
    texpr_ad derived), `no_grad_ops` (ops given a no-grad gradient), `gradient_errors` (worst
    relative error per parameter against torch.autograd on the example batch), `compile_seconds`.
    """

    def __init__(self, model: Any, example_inputs: Any, loss_fn: Callable[..., Any],
                 optimizer: Any, example_targets: Any = (), decompose: bool = True) -> None:
        import torch
        import tvm
        from tvm import relax
        from .api import prepare_for_build, static_strided_slices
        from .relax_ops import register_missing_gradients, right_stock_gradients
        if not isinstance(model, torch.nn.Module):
            raise TorchTrainError(f"train_torch: model must be a torch.nn.Module, got "
                                  f"{type(model).__name__}")
        opt = _optimizer(optimizer)  # refuse an unsupported optimizer before compiling
        self._torch_opt, self._hyper = optimizer, _hyper(optimizer)
        inputs, targets = _tuple(example_inputs), _tuple(example_targets)
        named = dict(model.named_parameters())
        self.param_names = trained(model, optimizer)
        self.buffer_names = [k for k in named if k not in self.param_names] + [
            k for k, _ in model.named_buffers()]
        self._step = _Step(model, loss_fn, len(inputs), self.param_names, self.buffer_names)
        self._n_data = len(inputs) + len(targets)
        self._specs = [_spec(a) for a in inputs], [_spec(a) for a in targets]
        sd = {**named, **dict(model.named_buffers())}
        state = [sd[k].detach().clone() for k in self.param_names + self.buffer_names]
        args = (*inputs, *targets, *state)
        ep = detach_no_grad(export(self._step.module(), args))
        ep = ep.run_decompositions(_decompositions(_wide(args))) if decompose else ep
        self._ep = ep = drop_asserts(ep)
        check_importable(ep)
        self.decompose = decompose
        t0 = time.perf_counter()
        mod = static_strided_slices(import_program(ep)[1])  # constant dynamic slices: shapes
        main = mod["main"]
        self.ops = Counter(str(b.value.op.name) for blk in main.body.blocks for b in blk.bindings
                           if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op))
        summary = register_missing_gradients(sorted(self.ops))
        self.derived_ops, self.no_grad_ops = summary.registered, summary.no_grad
        n_p = len(self.param_names)
        pvars = list(main.params[self._n_data:self._n_data + n_p])
        with right_stock_gradients():  # TVM's own are wrong for some calls (dilated conv2d)
            mod = relax.transform.Gradient("main", require_grads=pvars, target_index=0)(mod)
        self._opt = _init(opt, pvars)
        mod["optimizer"] = self._opt.get_function().with_attr("global_symbol", "optimizer")
        self._vm = relax.VirtualMachine(tvm.compile(prepare_for_build(mod), target="llvm"),
                                        tvm.cpu())
        self.compile_seconds = time.perf_counter() - t0
        self._mod = mod
        self._params = [tvm.runtime.tensor(a.numpy()) for a in state[:n_p]]
        self._buffers = [tvm.runtime.tensor(a.numpy()) for a in state[n_p:]]
        self._opt_state = self._opt.state
        self.gradient_errors = self.check_gradients(inputs, targets, _args=args)

    def _run(self, inputs: Sequence[Any], targets: Sequence[Any]) -> tuple[Any, Any]:
        import tvm
        arrays = [np.array(_np(a), order="C") for a in inputs], [np.array(_np(a), order="C")
                                                                 for a in targets]
        for kind, want, got in zip(("inputs", "targets"), self._specs, arrays):
            if len(got) != len(want):
                raise TorchTrainError(f"train_torch: the step takes {len(want)} {kind}, as the "
                                      f"example batch, got {len(got)}")
            for k, (w, a) in enumerate(zip(want, got)):
                if _spec(a) != w:  # TVM's VM would stop with a bare shape or dtype check
                    raise TorchTrainError(
                        f"train_torch: {kind}[{k}] has shape {_spec(a)[0]} and dtype "
                        f"{_spec(a)[1]}; the step is compiled for the example batch's {w[0]} and "
                        f"{w[1]}: use batches of that shape (DataLoader(drop_last=True)) and dtype, "
                        "or call train_torch for this one")
        data = [tvm.runtime.tensor(a) for a in (*arrays[0], *arrays[1])]
        return self._vm["main_adjoint"](*data, *self._params, *self._buffers)

    def check_gradients(self, inputs: Any, targets: Any = (),
                        _args: Any = None) -> dict[str, float]:
        """Forward and gradients of the current parameters on one batch against PyTorch: the
        worst relative error per parameter (also `gradient_errors`), relative to the parameter's
        largest gradient or to ZERO_GRAD times the model's largest, whichever is bigger.  A
        disagreeing forward raises `TorchTrainError` naming the first disagreeing op; gradients
        off by more than GRAD_RTOL raise it naming the parameter."""
        import torch
        inputs, targets = _tuple(inputs), _tuple(targets)
        if _args is None:
            state = [torch.from_numpy(t.numpy()) for t in (*self._params, *self._buffers)]
            _args = (*inputs, *targets, *state)
        n0, n_p = self._n_data, len(self.param_names)
        leaves = [a.clone().requires_grad_() for a in _args[n0:n0 + n_p]]
        want = self._step(*_args[:n0], *leaves, *_args[n0 + n_p:])
        want[0].backward()
        outs, grads = self._run(inputs, targets)
        for name, got, w in zip(["loss"] + self.buffer_names, outs, want):
            w = w.detach().numpy()
            if w.dtype.kind == "f" and _rel(got.numpy(), w, 1.0) > FORWARD_RTOL:
                raise TorchTrainError(self._forward_mismatch(name, _args))
        ref = [torch.zeros_like(p) if p.grad is None else  # None: unused
               p.grad.to_dense() for p in leaves]  # Embedding(sparse=True)'s is sparse
        floor = ZERO_GRAD * max(float(g.abs().max()) for g in ref)
        errors = {k: _rel(g.numpy(), r.numpy(), max(floor, 1e-30))
                  for k, g, r in zip(self.param_names, grads, ref)}
        bad = {k: e for k, e in errors.items() if e > GRAD_RTOL}
        if bad:
            k = max(bad, key=bad.get)  # type: ignore[arg-type]
            raise TorchTrainError(self._gradient_mismatch(k, bad[k]))
        return errors

    def _gradient_mismatch(self, name: str, err: float) -> str:
        """The message for a gradient that disagrees while the forward agrees: the parameter, the
        ops that read it, and the ops between it and the loss whose gradient texpr_ad derived."""
        from tvm import relax
        main = self._mod["main"]
        after = {main.params[self._n_data + self.param_names.index(name)]}
        ops = []
        for b in (b for blk in main.body.blocks for b in blk.bindings):
            if any(v in after for v in relax.analysis.free_vars(b.value)):
                after.add(b.var)
                ops += [str(b.value.op.name)] if isinstance(b.value, relax.Call) else []
        node = next(n for n in self._ep.graph.nodes if n.name == self._ep.graph_signature
                    .user_inputs[self._n_data + self.param_names.index(name)])
        derived = sorted(set(ops) & set(self.derived_ops))
        why = (f"one of the gradients texpr_ad derived for {derived}, or " if derived else "")
        return (f"train_torch: the gradient of parameter {name!r} differs from torch.autograd's by "
                f"{err:.2e} (relative; tolerance {GRAD_RTOL}) while the forward agrees; it is read "
                f"by {sorted({str(u.target) for u in node.users})}. The difference is in {why}TVM's "
                "own gradients of the ops on its path, or in an argument only PyTorch's backward "
                "reads that the importer drops (as embedding's padding_idx); report it with the "
                "model")

    def _forward_mismatch(self, output: str, args: Sequence[Any]) -> str:
        """The message for a forward that disagrees: the first disagreeing op, found by running
        every intermediate of the imported graph against PyTorch's (one extra compile)."""
        node, err = first_disagreeing_node(self._ep, args)
        where = (f"first at op {node.target} (node {node.name!r}{_where(node)}, relative error "
                 f"{err:.2e}): rewrite that op in plain tensor ops" if node is not None else
                 "no single op could be blamed")
        fix = ("; TVM's importer miscomputes some ops as they are (batch_norm, cross_entropy, elu):"
               " pass decompose=True" if not self.decompose else "")
        return (f"train_torch: the imported forward disagrees with PyTorch on output {output!r}, "
                f"{where}{fix}")

    def step(self, inputs: Any, targets: Any = ()) -> float:
        """One training step (forward, backward, optimizer update) on a batch; returns the loss."""
        changed = sorted(k for k, v in _hyper(self._torch_opt).items() if v != self._hyper[k])
        if changed:  # a torch LR scheduler, say: TVM's step has them compiled in
            raise TorchTrainError(f"train_torch: the optimizer's {', '.join(changed)} changed "
                                  f"since compiling ({self._hyper} -> {_hyper(self._torch_opt)}); "
                                  "TVM's step has them built in: call train_torch again")
        outs, grads = self._run(_tuple(inputs), _tuple(targets))
        self._buffers = list(outs)[1:]
        new_params, self._opt_state = self._vm["optimizer"](self._params, grads, self._opt_state)
        self._params = list(new_params)
        return float(outs[0].numpy())

    def state_dict(self) -> dict[str, Any]:
        """The trained parameters and buffers as torch tensors, keyed as `model.state_dict()`."""
        import torch
        return {k: torch.from_numpy(t.numpy().copy()) for k, t in
                zip(self.param_names + self.buffer_names, [*self._params, *self._buffers])}


def _spec(a: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of a tensor or array."""
    return tuple(a.shape), str(a.dtype).removeprefix("torch.")


def _np(a: Any) -> np.ndarray:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def first_disagreeing_node(ep: Any, args: Sequence[Any]) -> tuple[Any, float]:
    """(the first fx node of `ep` whose value TVM's import computes differently, its relative
    error), or (None, 0.0): every float intermediate of the imported graph is returned and
    compared in graph order with PyTorch's (`torch.fx.Interpreter` on the same program)."""
    import torch
    import tvm
    from tvm import relax
    imp, mod = import_program(ep, bind_tuple=True)
    main = mod["main"]
    bound = {str(b.var.name): b.var for blk in main.body.blocks for b in blk.bindings}
    probes = [(n, bound[str(v.name)]) for n, v in imp.env.items()
              if isinstance(v, relax.Var) and str(v.name) in bound
              and isinstance(v.ty, relax.TensorType) and str(v.ty.dtype).startswith("float")]
    if not probes:
        return None, 0.0
    blk = main.body.blocks[0]
    out_ty = relax.TupleType([v.ty for _, v in probes])
    out = relax.Var("probes", out_ty)
    body = relax.SeqExpr([relax.DataflowBlock(list(blk.bindings) + [
        relax.VarBinding(out, relax.Tuple([v for _, v in probes]))])], out)
    mod = tvm.IRModule({"main": relax.Function(main.params, body, out_ty).with_attr(
        "global_symbol", "main")})
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(np.array(_np(a), order="C")) for a in args])
    seen: dict[Any, Any] = {}

    class Rec(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            seen[n] = r = super().run_node(n)
            return r

    Rec(ep.graph_module).run(*args)
    order = {n: k for k, n in enumerate(ep.graph_module.graph.nodes)}
    for (n, _), g in sorted(zip(probes, got), key=lambda t: order.get(t[0][0], 0)):
        w = seen.get(n)
        if isinstance(w, torch.Tensor) and tuple(w.shape) == tuple(g.numpy().shape):
            err = _rel(g.numpy(), w.detach().numpy(), 1.0)
            if err > FORWARD_RTOL:
                return n, err
    return None, 0.0


def train_torch(model: Any, example_inputs: Any, loss_fn: Callable[..., Any], optimizer: Any, *,
                example_targets: Any = (), decompose: bool = True) -> TorchTrainer:
    """Compile a training step of `model` in TVM Relax, checked against PyTorch.

    `loss_fn(model(*inputs), *targets)` is the loss; `example_inputs` and `example_targets` (a
    tensor or a tuple of them) fix the shapes and are the batch the forward and the first-step
    gradients are checked on.  `optimizer` is a `torch.optim.SGD` or `torch.optim.Adam` over the
    model's parameters or some of them (the others are not trained, as in PyTorch); its
    hyperparameters select TVM's matching optimizer.  The model is trained
    in its current mode (train mode: BatchNorm normalizes with batch statistics and its running
    statistics are updated every step).  `decompose=False` imports torch's ops as they are (TVM
    0.27 miscomputes some; the forward check then refuses them).  The model itself is not changed;
    `model.load_state_dict(trainer.state_dict())` copies the trained values back.

    Example::

        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        trainer = train_torch(model, (x,), torch.nn.functional.cross_entropy, opt,
                              example_targets=(y,))
        losses = [trainer.step((x,), (y,)) for _ in range(10)]
    """
    return TorchTrainer(model, example_inputs, loss_fn, optimizer, example_targets, decompose)


__all__ = ["TorchTrainError", "TorchTrainer", "first_disagreeing_node", "train_torch"]
