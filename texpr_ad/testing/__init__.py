"""Checking helpers for tests, the coverage report, the CLI, the bridge and the bench.

In the spirit of `jax.test_util`: one place for the numerical gradient check, the
relative error, the timer and the statuses, below everything that reports.

- `numeric`: NumPy only: `Status`, `Result`, `rel_error`, `grad_error` (central
  differences along directions), `numerical_grad` (all elements), `fd_step`, `timed`, `sample_times`.
- `ops`: registry operators: `derive`, `check_forward`, `check_grad`, `vjp_error`,
  runners (`interp_runner`, `cpu_runner`, `CachedCPURunner`), `kernel_jobs`.
- `cuda`: `check_cuda` (CUDA kernels against the CPU's); `ptx`: registers and spills.
"""
from .numeric import (Result, Status, fd_step, grad_error, numerical_grad, rel_error, sample_times,
                      timed)
from .ops import (CachedCPURunner, Derived, Runner, adjoint_strategy, check_forward, check_grad,
                  cpu_runner, derive, failure, interp_runner, kernel_jobs, vjp_error)

__all__ = ["CachedCPURunner", "Derived", "Result", "Runner", "Status", "adjoint_strategy",
           "check_forward", "check_grad", "cpu_runner", "derive", "failure", "fd_step",
           "grad_error", "interp_runner", "numerical_grad", "kernel_jobs", "rel_error", "sample_times", "timed",
           "vjp_error"]
