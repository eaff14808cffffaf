"""Dump the plan and generated source of every registry operator, for diffing refactors.

    python -m bench.dump_sources OUTDIR [PATTERN]
    python -m bench.dump_sources --bench OUTDIR

For each operator with a compute form, in float32 and float64, the forward and the adjoint
kernels are planned and rendered (nothing is compiled, no GPU needed) for cpu and cuda:
OUTDIR/<op>.<dtype>.<fwd|bwd>.<target>.py (the source) and .plan.txt (str(plan)).
Compare two dumps with `diff -r`: the sources must not change unless on purpose.  `--bench`
dumps the bench's workloads and user operators instead, at their full sizes (the registry's
samples are small: loops that stages share, split sums, blocks and CUDA tiles need real sizes).
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

from texpr_ad.kernels.backends import backend
from texpr_ad.ops import select
from texpr_ad.schedule.planner import plan_stages
from texpr_ad.testing import derive


def plan_and_render(outs: list, ins: list, target: str) -> tuple[object, str]:
    """The build pipeline up to the source (no availability check, no compile)."""
    b = backend(target)
    plan = b.refine(plan_stages(outs, ins), None)
    return plan, b.renderer().render(plan)


def dump(out: Path, pattern: str = "*") -> int:
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for entry in (e for e in select(pattern) if e.has_compute):
        for dtype in ("float32", "float64"):
            try:
                s = entry.sample(dtype)  # type: ignore[misc]
                kernels = [("fwd", list(s.outputs), list(s.inputs))]
                d = derive(entry, dtype)
                if d is not None:
                    live = [g for g in d.grads if g is not None]
                    kernels.append(("bwd", live, list(d.sample.inputs) + d.heads))
            except Exception:  # noqa: BLE001 - some samples have no float32 form
                (out / f"{entry.name}.{dtype}.error.txt").write_text(traceback.format_exc())
                continue
            for kind, outs, ins in kernels:
                for target in ("cpu", "cuda"):
                    stem = out / f"{entry.name}.{dtype}.{kind}.{target}"
                    try:
                        plan, src = plan_and_render(outs, ins, target)
                    except Exception:  # noqa: BLE001 - recorded, diffed like the rest
                        Path(f"{stem}.error.txt").write_text(traceback.format_exc(limit=3))
                        continue
                    Path(f"{stem}.py").write_text(src)
                    Path(f"{stem}.plan.txt").write_text(str(plan) + "\n")
                    n += 1
    return n


def dump_bench(out: Path) -> int:
    """The forward and the adjoint (every float input) of each bench workload and user op."""
    import numpy as np
    from texpr_ad import te
    from texpr_ad.deriv import grad

    from .user_defs import USER_OPS
    from .workloads import WORKLOADS, make
    out.mkdir(parents=True, exist_ok=True)
    cases = [(n, w.output, list(w.inputs), [w.inputs[k] for k in w.float_inputs])
             for n, w in ((n, make(n)) for n in WORKLOADS)]
    for u in USER_OPS.values():
        arrays = u.make(False, np.random.default_rng(0))
        ins = {a: te.placeholder(arrays[a].shape, str(arrays[a].dtype), name=a) for a in u.args}
        cases.append((u.name, u.te_fn(*ins.values()), list(ins.values()), [ins[a] for a in u.diff]))
    for name, y, ins, wrt in cases:
        head = te.placeholder(y.shape, y.dtype, name="head")
        for kind, outs, args in (("fwd", [y], ins),
                                 ("bwd", [g for g in grad(y, wrt, head) if g is not None],
                                  [*ins, head])):
            for target in ("cpu", "cuda"):
                plan, src = plan_and_render(outs, args, target)
                (out / f"{name}.{kind}.{target}.py").write_text(src)
                (out / f"{name}.{kind}.{target}.plan.txt").write_text(str(plan) + "\n")
    return 4 * len(cases)


if __name__ == "__main__":
    if sys.argv[1] == "--bench":
        print(dump_bench(Path(sys.argv[2])), "kernels")
    else:
        print(dump(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "*"), "kernels")
