"""docs/BENCHMARKS.md is rendered from bench/results: the page cannot drift from what the
benchmark scripts wrote, and it stays a page a user reads (not a log)."""

from __future__ import annotations

import re

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
