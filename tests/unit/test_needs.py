"""A missing service is one skip reason in a plain run and stops a CI run."""

from __future__ import annotations

import pytest

from tests.support.needs import missing


@pytest.mark.parametrize(("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.exit.Exception)])
def test_a_missing_service_skips_here_and_stops_ci(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"MariaDB is not available: refused \(start it\)"):
        missing("MariaDB", "refused", "start it")
