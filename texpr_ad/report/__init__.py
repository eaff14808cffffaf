"""The coverage report over the operator registry, its renderings and the `texpr-ad` CLI."""
from ..testing import Result, check_forward, check_grad, cpu_runner, derive, interp_runner
from .columns import COLUMNS, Column, select_columns
from .coverage import LEGEND, SCHEMA, Report, run_coverage
from .render import render_html, render_json, render_markdown, render_table

__all__ = [
           "COLUMNS",
           "LEGEND",
           "SCHEMA",
           "Column",
           "Report",
           "Result",
           "check_forward",
           "check_grad",
           "cpu_runner",
           "derive",
           "interp_runner",
           "render_html",
           "render_json",
           "render_markdown",
           "render_table",
           "run_coverage",
           "select_columns",
]
