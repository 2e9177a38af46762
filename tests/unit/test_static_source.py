"""The static assignment file (``ferry worker --assignment FILE``): its origins' worker counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.errors import ConfigError
from ferry.worker.static_source import load

SUB = {"name": "s", "topics": ["t"], "endpoint": {"url": "http://svc:8080/hook"}}


def write(tmp_path: Path, **doc: object) -> str:
    path = tmp_path / "assignment.json"
    path.write_text(json.dumps({"subscriptions": [SUB], **doc}))
    return str(path)


def test_origins_are_read_with_the_rest(tmp_path: Path) -> None:
    subs, refs, origins = load(write(tmp_path, origins={"http://svc:8080": 3}))
    assert set(subs) == {"s"} and refs is None and origins == {"http://svc:8080": 3}
    assert load(write(tmp_path))[2] == {}  # none given: alone


@pytest.mark.parametrize("origins", [["http://svc:8080"], {"http://svc:8080": 0}, {"http://svc:8080": "2"}])
def test_bad_origins_say_what_to_give(tmp_path: Path, origins: object) -> None:
    with pytest.raises(ConfigError, match="origins must map an origin to a worker count"):
        load(write(tmp_path, origins=origins))
