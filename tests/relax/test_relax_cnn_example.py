"""examples/relax_cnn.py: stock TVM 0.27 aborts on the CNN; with the derived gradients it trains.

Run as a user runs it (a subprocess), so that the stock pass really has no gradients yet.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "relax_cnn.py"


def test_relax_cnn_trains() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(EXAMPLE.parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "6"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "FPrimalGradient has not been registered for relax." in out.stdout
    losses = [float(v) for v in re.findall(r"step \d+: loss ([0-9.]+)", out.stdout)]
    assert len(losses) == 6
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0], losses
