"""``ferry apply``: from subscription documents in files to the changes that make the portal match
them (pure, table-tested in tests/unit/test_client_plan.py).

Use case: a cluster's subscriptions live in Git as YAML or JSON files; ``ferry apply -f DIR`` shows
what it will change (a diff per subscription), creates the missing ones, updates the changed ones
and, with ``--prune``, deletes those the files no longer list. Applying the same files twice
changes nothing the second time.

Documents are compared in the portal's own form (every default filled in, header values masked):
a desired document is normalised with :func:`ferry.subscription.parse` first. Secret header values
are not shown by the portal, so a header whose value alone changed is not seen as a change; the
``--force`` flag updates every listed subscription.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ferry.errors import ValidationError
from ferry.subscription import MASK, parse

Doc = dict[str, Any]


class DocumentError(ValidationError):
    """A document read well but is not a valid subscription (``ferry apply`` exits 1, not 2)."""


@dataclass
class Plan:
    create: list[Doc] = field(default_factory=list)
    update: list[tuple[Doc, Doc]] = field(default_factory=list)  # (current, desired)
    delete: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def load_documents(paths: Sequence[str]) -> list[Doc]:
    """Subscription documents from files or directories (``*.yaml``, ``*.yml``, ``*.json``; a file
    may hold several YAML documents or a JSON list)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml", ".json"))
        elif p.exists():
            files.append(p)
        else:
            raise ValidationError("-f", f"{p} does not exist")
    docs: list[Doc] = []
    for f in files:
        text = f.read_text()
        try:
            loaded = [json.loads(text)] if f.suffix == ".json" else list(yaml.safe_load_all(text))
        except (ValueError, yaml.YAMLError) as exc:
            raise ValidationError(str(f), f"is not valid {'JSON' if f.suffix == '.json' else 'YAML'}: {exc}") from None
        for item in loaded:
            for doc in item if isinstance(item, list) else [item]:
                if doc is None:
                    continue
                if not isinstance(doc, dict):
                    raise DocumentError(str(f), "every document must be a subscription object")
                docs.append(doc)
    names = [d.get("name") for d in docs]
    dupes = sorted({n for n in names if names.count(n) > 1 and isinstance(n, str)})
    if dupes:
        raise DocumentError("name", f"{dupes[0]!r} is defined twice")
    return docs


def normalise(doc: Mapping[str, Any]) -> Doc:
    """The document as the portal shows it (defaults filled in, secrets masked)."""
    try:
        return parse(dict(doc)).to_doc(mask_secrets=True)
    except ValidationError as exc:
        raise DocumentError(f"{doc.get('name', '?')}: {exc.field}", exc.message) from None


def _same(current: Doc, desired: Doc) -> bool:
    cur = json.loads(json.dumps(current))
    want = json.loads(json.dumps(desired))
    cur_headers = cur.get("endpoint", {}).get("headers", {})
    want_headers = want.get("endpoint", {}).get("headers", {})
    if set(cur_headers) == set(want_headers):
        want.setdefault("endpoint", {})["headers"] = {
            k: MASK if cur_headers[k] == MASK else v for k, v in want_headers.items()
        }
    cur.pop("state", None)
    want.pop("state", None)
    return bool(cur == want)


def plan(current: Sequence[Doc], desired: Sequence[Doc], *, prune: bool, force: bool = False) -> Plan:
    have = {d["name"]: d for d in current}
    out = Plan()
    for raw in desired:
        want = normalise(raw)
        name = want["name"]
        if name not in have:
            out.create.append(raw)
        elif force or not _same(have[name], want):
            out.update.append((have[name], raw))
        else:
            out.unchanged.append(name)
    if prune:
        wanted = {normalise(d)["name"] for d in desired}
        out.delete = sorted(n for n in have if n not in wanted)
    return out


def diff(current: Doc | None, desired: Doc | None, name: str) -> str:
    def lines(d: Doc | None) -> list[str]:
        return [] if d is None else (json.dumps(d, indent=2, sort_keys=True) + "\n").splitlines(keepends=True)

    return "".join(difflib.unified_diff(lines(current), lines(desired), f"portal/{name}", f"files/{name}"))
