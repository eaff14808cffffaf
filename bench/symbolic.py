"""Kernels for a batch size known only at the call, against the same kernels built for the static
size, on the bench workloads (issue #27: what torch.compile's dynamic shapes run).

    python -m bench.symbolic [--repeat N] [--quick] [--only NAME,NAME]   # or: python -m bench --symbolic

Each workload is built twice: with its placeholders' batch dim (the size of the first input's
dim 0, in every input that has it) a `te.var`, as `custom_op(dynamic=True)` and torch.compile's
automatic dynamic shapes make it, and static.  Forward, training step (forward + backward) and
backward alone are timed in interleaved rounds (median ms); `sym/static` is the cost of not
knowing the batch when the kernels are built.  A workload whose te definition needs a static
batch is listed with the reason.
"""
from __future__ import annotations

import argparse
import math
from typing import Any, Sequence

import numpy as np

from bench import workloads
from bench.__main__ import paired_times, set_threads

SIDES = ("fwd", "step", "bwd")


def calls(name: str, quick: bool, symbolic: bool) -> dict[str, Any]:
    """The timed calls {fwd, step, bwd} of workload `name` and its gradients."""
    import texpr_ad as ta
    w = workloads.make(name, quick, symbolic_batch=symbolic)
    fwd, bwd = ta.vjp([w.output], list(w.inputs))
    outs, res = fwd(*w.arrays)
    g = np.random.default_rng(1).standard_normal(outs[0].shape).astype(outs[0].dtype)
    return {"fwd": lambda: fwd(*w.arrays), "step": lambda: bwd(fwd(*w.arrays)[1], g),
            "bwd": lambda: bwd(res, g), "grads": [x for x in bwd(res, g) if x is not None]}


def run(names: Sequence[str], quick: bool = False, repeat: int = 5) -> dict[str, dict[str, float]]:
    import torch
    from bench.user_ops import cpu_line
    set_threads()
    print(f"texpr_ad kernels with a symbolic batch vs static, repeat={repeat}, quick={quick}")
    print(cpu_line(torch))
    print(f"{'workload':18s} {'':5s} {'static ms':>10s} {'sym ms':>10s} {'sym/static':>11s}")
    ratios: dict[str, dict[str, float]] = {}
    for name in names:
        try:
            st, sy = calls(name, quick, False), calls(name, quick, True)
        except Exception as e:  # noqa: BLE001 - a definition that needs static sizes: reported
            print(f"{name:18s} not built with a symbolic batch: {type(e).__name__}: {e}"[:160])
            continue
        err = max(float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) or 1.0))
                  for a, b in zip(sy["grads"], st["grads"], strict=True))
        ratios[name] = {}
        for k, side in enumerate(SIDES):
            (ts, _), (ty, _) = paired_times(st[side], sy[side], repeat=repeat)
            ratios[name][side] = ty / ts
            label = name if k == 0 else ""
            print(f"{label:18s} {side:5s} {ts * 1e3:10.2f} {ty * 1e3:10.2f} {ty / ts:11.2f}"
                  + (f"   grads max rel diff {err:.1e}" if k == 0 else ""))
    for side in SIDES:
        xs = [r[side] for r in ratios.values()]
        if xs:
            print(f"geomean sym/static {side}: {math.exp(sum(map(math.log, xs)) / len(xs)):.2f} "
                  f"({len(xs)} workloads)")
    return ratios


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.symbolic",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    a = ap.parse_args(argv)
    run([n for n in a.only.split(",") if n] or list(workloads.WORKLOADS), a.quick, a.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
