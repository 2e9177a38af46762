"""``ferry apply``'s plan, pure: what is created, updated, deleted, and that applying the same files
twice plans nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.client.plan import diff, load_documents, normalise, plan
from ferry.errors import ValidationError


def doc(name: str, **extra: object) -> dict:  # type: ignore[type-arg]
    return {"name": name, "topics": ["orders"], "endpoint": {"url": "http://billing:8000/hook"}, **extra}


def test_create_update_unchanged_and_prune() -> None:
    current = [normalise(doc("a")), normalise(doc("b")), normalise(doc("old"))]
    desired = [doc("a"), doc("b", max_in_flight=5), doc("c")]
    p = plan(current, desired, prune=False)
    assert [d["name"] for d in p.create] == ["c"]
    assert [d["name"] for _, d in p.update] == ["b"]
    assert p.unchanged == ["a"] and p.delete == []
    assert plan(current, desired, prune=True).delete == ["old"]


def test_applying_the_same_documents_twice_plans_nothing() -> None:
    desired = [doc("a", endpoint={"url": "http://x/h", "headers": {"Authorization": "Bearer s3cret"}}), doc("b")]
    current = [{**normalise(d), "state": "paused"} for d in desired]  # a paused one stays as it is
    p = plan(current, desired, prune=True)
    assert p.empty and sorted(p.unchanged) == ["a", "b"]
    assert [d["name"] for _, d in plan(current, desired, prune=True, force=True).update] == ["a", "b"]


def test_an_invalid_document_names_itself_and_its_field() -> None:
    with pytest.raises(ValidationError) as e:
        plan([], [doc("a", ordering="random")], prune=False)
    assert e.value.field == "a: ordering"


def test_files_yaml_multi_documents_json_lists_and_duplicates(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "name: a\ntopics: [orders]\nendpoint: {url: http://x/h}\n---\nname: b\ntopics: [t]\nendpoint: {url: http://x/h}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text('[{"name": "c", "topics": ["t"], "endpoint": {"url": "http://x/h"}}]')
    (tmp_path / "notes.txt").write_text("ignored")
    assert [d["name"] for d in load_documents([str(tmp_path)])] == ["a", "b", "c"]
    (tmp_path / "dup.yml").write_text("name: a\ntopics: [x]\nendpoint: {url: http://x/h}\n")
    with pytest.raises(ValidationError, match="'a' is defined twice"):
        load_documents([str(tmp_path)])
    with pytest.raises(ValidationError):
        load_documents([str(tmp_path / "missing.yaml")])


def test_diff_shows_the_change() -> None:
    out = diff(normalise(doc("b")), normalise(doc("b", max_in_flight=5)), "b")
    assert '-  "max_in_flight": 100,' in out and '+  "max_in_flight": 5,' in out
