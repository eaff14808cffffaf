"""Derived Relax gradients at parameter settings the one-sample-per-op check does not reach.

Each case is a call of a Relax op with attributes a user meets (an empty reduction axes list,
negative axes, keepdims, slices stopping short of the end with strides > 1, padding modes),
checked like the coverage report's samples: `relax.transform.Gradient` + `tvm.compile(llvm)` +
the VM against float64 central differences of the compiled forward.
"""
from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from texpr_ad.relax_bridge import register_missing_gradients  # noqa: E402
from texpr_ad.relax_bridge.relax_opcheck import check  # noqa: E402
from texpr_ad.relax_bridge.relax_samples import VARIANTS, Sample, _op, _s, f  # noqa: E402

CASES: dict[str, Sample] = {
    # axis=[] reduces over nothing (TVM: a Reduce with no axes, the identity); the translation
    # called te.max/min/prod/sum with no reduce axis and failed ("axis= is empty")
    **{f"relax.{n}[empty axes]": _s(n, f(3, 4), attrs={"axis": []})
       for n in ("max", "min", "prod", "std")},
    **{f"relax.{n}[negative axes, keepdims]": _s(n, f(2, 3, 4), attrs={
        "axis": [0, -1], "keepdims": True}) for n in ("max", "prod", "std")},
    "relax.strided_slice[short of the end, stride 2]": _s("strided_slice", f(7, 6), attrs={
        "axes": [0, -1], "begin": [1, -5], "end": [5, -1], "strides": [2, 3]}),
    "relax.slice_scatter[step 2, short of the end]": Sample(
        lambda x, v: _op("slice_scatter")(x, v, 1, 6, 3, -2), (f(8, 2), f(2, 2))),
    "relax.nn.pad[reflect]": _s("nn.pad", f(2, 4), attrs={"pad_width": [1, 1, 2, 1],
                                                          "pad_mode": "reflect"}),
    "relax.nn.pad[edge]": _s("nn.pad", f(2, 4), attrs={"pad_width": [1, 1, 2, 1],
                                                       "pad_mode": "edge"}),
    # grid points outside [-1, 1] reflect; the derived grid gradient reuses the reflected
    # coordinates in every term: ~186,000 characters of TIR that create_prim_func had not
    # lowered after 100 s, until to_tvm.hoist_shared gave shared subexpressions stages
    "relax.image.grid_sample[reflection]": _s(
        "image.grid_sample", f(1, 2, 4, 4), f(1, 3, 3, 2, lo=-1.6, hi=1.6),
        attrs={"padding_mode": "reflection"}),
}


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    register_missing_gradients(sorted({k.split("[")[0] for k in CASES}))


@pytest.mark.parametrize("key", list(CASES))
def test_variant_through_the_pass(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(VARIANTS, key, CASES[key])
    r = check(key)
    assert r.status == "ok", r.detail
