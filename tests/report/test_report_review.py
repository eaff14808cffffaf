"""What the coverage report told a new reader that was not so (the report review pass).

Each test pins one finding: before its fix, the report or the CLI misled (a typo'd operator
silently dropped, a CUDA mode claimed that did not run, a header naming neither the CPU nor
the threads the timings ran on).
"""
import pytest

from texpr_ad.report import cli


def test_an_ops_glob_that_matches_nothing_is_refused_even_beside_one_that_matches(
        capsys, no_matrix):
    """`--ops relu,reluu` ran relu alone and exited 0: the typo'd operator was silently
    missing from the report.  Each glob must match; the line names it and close names."""
    assert cli.main(["coverage", "--ops", "relu,reluu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("texpr-ad coverage: error: --ops 'reluu' matches no operator"), err
    assert "relu" in err.split("matches no operator")[1], err  # the close name
    assert not no_matrix


def test_a_relax_ops_glob_that_matches_nothing_is_refused(capsys, no_matrix):
    pytest.importorskip("tvm")
    assert cli.main(["coverage", "--relax", "--ops", "relax.nn.gelu,relax.nn.gelux",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--ops 'relax.nn.gelux' matches no Relax tensor op" in err, err
    assert not no_matrix


def test_cuda_mode_says_not_run_when_the_cuda_column_was_not_selected():
    """`--targets cpu` on a machine without a GPU wrote 'cuda on gpu' in the Markdown and HTML
    headers and `"cuda_mode": "gpu"` in the JSON: a GPU claim for a column that never ran."""
    from texpr_ad.ops import registry
    from texpr_ad.report.columns import select_columns
    from texpr_ad.report.coverage import run_coverage
    from texpr_ad.report.render import render_html, render_markdown
    rep = run_coverage(registry.select("relu"), select_columns("cpu"))
    assert rep.environment["cuda_mode"] == "not run"
    assert "cuda: not run" in render_markdown(rep) and "cuda: not run" in render_html(rep)


def test_the_cuda_column_title_says_simulator_where_the_cells_are_read(monkeypatch):
    """On Numba's simulator the cuda cells read '✓ 0' under a plain 'cuda' header: only the
    Markdown/HTML meta line (not the terminal table) said no GPU ran."""
    from texpr_ad.kernels import cuda_runtime
    from texpr_ad.ops import registry
    from texpr_ad.testing import cuda as tcuda
    from texpr_ad.report.columns import select_columns
    from texpr_ad.report.coverage import run_coverage
    from texpr_ad.report.render import render_table
    from texpr_ad.testing import Result, Status
    monkeypatch.setattr(cuda_runtime, "simulating", lambda: True)
    monkeypatch.setattr(tcuda, "check_cuda", lambda entry: Result(Status.OK, 0.0, "simulator"))
    rep = run_coverage(registry.select("relu"), select_columns("cuda"))
    assert rep.environment["cuda_mode"] == "simulator"
    assert [c.title for c in rep.columns] == ["cuda sim"]
    assert "cuda sim" in render_table(rep).splitlines()[1]  # the line under the header line


def test_every_rendering_names_the_cpu_the_threads_and_how_t_torch_is_timed():
    """The report's timings (t/torch) and its 'fwd cpu'/'grad cpu' columns named no CPU model and
    no thread count: the JSON had only cpu_count, the terminal table no header at all, and a
    --jobs 2 run timed kernels on 1 thread per worker while a --jobs 1 run used every core."""
    import numba

    from texpr_ad.ops import registry
    from texpr_ad.report.columns import select_columns
    from texpr_ad.report.coverage import run_coverage
    from texpr_ad.report.render import render_html, render_json, render_markdown, render_table
    one = run_coverage(registry.select("relu"), select_columns("cpu,torch"))
    two = run_coverage(registry.select("relu,floor"), select_columns("cpu"), jobs=2)
    assert one.environment["cpu"] and one.environment["threads"] == numba.get_num_threads()
    assert two.environment["threads"] == 1
    head = one.header_line()
    assert head.startswith(f"CPU: {one.environment['cpu']} (")
    assert "Numba target='cpu'" in head and "fastest of 7 calls" in head
    assert "t/torch" not in two.header_line()  # no torch column: no timing to explain
    assert render_table(one).splitlines()[0] == head
    assert head in render_markdown(one)
    assert '"cpu": ' in render_json(one) and "Numba target=&#x27;cpu&#x27;" in render_html(one)


def test_column_descriptions_say_what_the_figures_are_measured_against():
    """The descriptions rendered into the Markdown/HTML column table and the JSON disagreed with
    docs/coverage_schema.md: 'grad cpu' said 'max relative error' (it is the scale-free
    |<g,t> - fd| / (|g| |t|)), 'tvm' named only the derived adjoint (it also checks the forward
    and central differences), 't/torch' gave no sample, statistic or note on call overhead."""
    from texpr_ad.report.columns import COLUMNS_BY_KEY, column_doc
    assert "scale-free" in column_doc(COLUMNS_BY_KEY["grad"])
    assert "central differences" in column_doc(COLUMNS_BY_KEY["tvm"])
    t = column_doc(COLUMNS_BY_KEY["torch_time"])
    assert "fastest of 7" in t and "call overhead" in t


def test_relax_summary_says_which_no_grad_ops_were_not_checked():
    """'28 no-grad (25 pass)' read as 3 failures, or 3 hidden ones: 3 no-grad ops (nonzero,
    unique, all_class_non_max_suppression) have no sample and are not checked at all."""
    from texpr_ad.report.relax_matrix import RelaxReport, RelaxRow, _counts, summary_lines
    rows = [RelaxRow("relax.a", "no-grad", check="ok"), RelaxRow("relax.b", "no-grad")]
    line = summary_lines(RelaxReport(rows, "0.27", 1.0, _counts(rows)))[0]
    assert "2 no-grad (1 pass, 1 not checked: relax.b)" in line


def test_docs_cli_coverage_section_names_every_option(capsys):
    """docs/cli.md's `texpr-ad coverage` section never mentioned `--relax` (the whole Relax
    matrix) outside its usage-error list: a reader of the command's page could not find it."""
    import re
    from pathlib import Path
    with pytest.raises(SystemExit):
        cli.main(["coverage", "--help"])
    opts = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out)) - {"--help", "--output"}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = doc.split("## `texpr-ad coverage`")[1].split("\n## ")[0]
    synopsis = section.split("```")[1]
    assert {o for o in opts if o not in synopsis} == set()


@pytest.mark.parametrize("slash", ["/", ""], ids=["trailing_slash", "existing_folder"])
def test_output_to_a_folder_writes_inside_it(tmp_path, capsys, slash):
    """`-o reports/` wrote `reports.md` beside the folder (and `wrote .../reports.md`), not
    into it; an existing folder without the slash likewise."""
    folder = tmp_path / "reports"
    if not slash:
        folder.mkdir()
    assert cli.main(["coverage", "--ops", "relu", "--targets", "cpu", "--format", "md",
                     "-o", f"{folder}{slash}", "--no-progress"]) == 0
    assert (folder / "coverage.md").is_file() and not (tmp_path / "reports.md").exists()
    assert f"wrote {folder / 'coverage.md'}" in capsys.readouterr().err
