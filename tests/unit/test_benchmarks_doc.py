"""docs/BENCHMARKS.md is rendered from bench/results: the page cannot drift from what the
benchmark scripts wrote, and it stays a page a user reads (not a log)."""

from __future__ import annotations

import re
from pathlib import Path

from bench import _results, render


def test_the_page_is_what_the_results_render() -> None:
    page = render.PAGE.read_text()
    assert render.render(page) == page, "run: python3 -m bench.render"


def test_every_result_is_on_the_page_and_every_table_has_a_result() -> None:
    page = render.PAGE.read_text()
    on_page = set(re.findall(r"<!-- table:([\w-]+) -->", page))
    assert on_page == set(_results.names())


def test_the_page_stays_short() -> None:
    assert len(render.PAGE.read_text().splitlines()) <= 215


def test_every_result_is_written_by_the_bench_its_command_runs() -> None:
    """A table's command must be what writes it: a result the bench does not save would be a
    figure no command reproduces."""
    root = Path(render.__file__).resolve().parents[1]
    for name in _results.names():
        argv = _results.load(name)["command"].split()
        script = argv[2].replace(".", "/") + ".py" if argv[1] == "-m" else argv[1]
        source = (root / script).read_text()
        assert re.search(rf'save\(\s*"{name}"', source), f"{script} does not save the {name!r} table"
