"""The fast tier stays fast: every test module that needs real services is marked ``integration``,
so ``pytest -m "not integration"`` runs only in-process tests (docs/development.md)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_service_test_module_is_marked_integration() -> None:
    unmarked = []
    for folder in ("integration", "chaos", "spark", "browser"):
        for path in sorted((TESTS / folder).glob("test_*.py")):
            text = path.read_text()
            if not re.search(r"^pytestmark = .*pytest\.mark\.integration", text, re.M):
                unmarked.append(str(path.relative_to(TESTS)))
    assert not unmarked, f"mark these `pytestmark = pytest.mark.integration`: {unmarked}"
