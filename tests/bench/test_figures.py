"""The benchmark figures' registry and the report, from the stored results (nothing is measured)."""

import importlib.util

import pytest

from bench import report, run_all
from bench.common import DOCS, RESULTS, ROOT
from bench.figures import FIGURES, figures


def test_the_registry_lists_every_figure_module_and_every_results_file():
    modules = {p.stem for p in (ROOT / "bench" / "figures").glob("*.py")} - {"__init__"}
    assert sorted(modules) == sorted(FIGURES)
    assert len(set(FIGURES)) == len(FIGURES)
    results = [run.results for fig in figures() for run in fig.runs]
    assert len(set(results)) == len(results)
    # A new figure may wait for its first run (the report says "Not measured yet"); no file goes unread.
    assert {p.stem for p in RESULTS.glob("*.json")} <= set(results)


def test_run_all_runs_each_results_file_through_its_figure_module():
    benches = run_all.benches()
    assert sorted(benches) == sorted(run.results for fig in figures() for run in fig.runs)
    assert benches["decode_quantized"] == ["bench.figures.decode", "--quantized"]
    for module, *_args in benches.values():
        assert importlib.util.find_spec(module) is not None, module


def test_without_results_every_figure_says_how_to_measure_it(tmp_path):
    text = report.render(figures(), {}, tmp_path / "bench")
    assert "No results yet: run `make bench`." in text
    for number, fig in enumerate(figures(), 1):
        assert f"## {number}. {fig.title}\n\nNot measured yet: `python -m bench.figures.{fig.name}`." in text
    assert not list((tmp_path / "bench").iterdir())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    pytest.importorskip("matplotlib")
    plots = tmp_path_factory.mktemp("plots")
    figs = figures()
    return report.render(figs, report.load(figs), plots), plots


def test_the_stored_results_render_every_section_and_plot(rendered):
    text, plots = rendered
    assert "failed:" not in text  # a plot or a section that raised
    measured = [(n, fig) for n, fig in enumerate(figures(), 1) if (RESULTS / f"{fig.name}.json").exists()]
    assert len(measured) >= 12  # the figures measured when this test was written
    for number, fig in measured:
        title = f"{number}. {fig.title}"
        image = f"![{title}](bench/{fig.name}.png)\n\n" if fig.plot else ""
        assert f"## {title}\n\n{image}Reproduce: `python -m bench.figures.{fig.name}" in text
        if fig.plot:
            assert (plots / f"{fig.name}.png").stat().st_size > 10_000
    assert text.count("| 1 | decode tok/s, Chinwag / mlx-lm") == 2  # decode's headline rows: both of its runs


def test_docs_benchmarks_md_is_what_the_report_writes_from_the_stored_results(rendered):
    # Fails when a figure module or a results file changed without `python -m bench.report`.
    assert (DOCS / "BENCHMARKS.md").read_text() == rendered[0]
