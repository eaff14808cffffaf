"""Scheduling: turn a tensor DAG into an inspectable loop-nest `Plan`."""
from .plan import ComputeStage, Inline, Plan, ScatterStage
from .planner import OVERRIDE_KEYS, ScheduleError, plan_kernel

__all__ = ["ComputeStage", "Inline", "OVERRIDE_KEYS", "Plan", "ScatterStage", "ScheduleError",
           "plan_kernel"]
