"""Write `schemas/` from the event Structs: `.venv/bin/python tools/export_schemas.py [--out DIR]`.

Event files of types that no longer exist are removed, so the folder is exactly what the code
says; `tools/check_schemas.py` is what decides whether that change is allowed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `tools.*` importable

import yaml  # noqa: E402

from tools._api_schemas import api_files, api_index  # noqa: E402
from tools._asyncapi import asyncapi  # noqa: E402
from tools._openapi import OPENAPI, openapi_document  # noqa: E402
from tools._schemas import (  # noqa: E402
    GENERATED_BY,
    data_files,
    event_schema,
    index,
    placements,
    to_json,
)


def generate() -> dict[str, str]:
    """Every file of `schemas/`, by its path inside that folder (deterministic)."""
    places = placements()
    files = {f"events/{p.tag}.json": to_json(event_schema(p.cls)) for p in places}
    files.update({rel: to_json(doc) for rel, doc in api_files().items()})
    files.update({rel: to_json(doc) for rel, doc in data_files().items()})
    files["index.json"] = to_json({**index(places), "api": api_index()})
    document = yaml.safe_dump(asyncapi(places), sort_keys=False, allow_unicode=True, width=100)
    files["asyncapi.yaml"] = f"# {GENERATED_BY}\n{document}"
    files[OPENAPI] = to_json(openapi_document())
    return dict(sorted(files.items()))


def is_generated(path: str) -> bool:
    """Whether a path inside `schemas/` is one `generate` owns (others are left alone)."""
    return path in ("index.json", "asyncapi.yaml", OPENAPI) or (
        path.startswith(("events/", "api/", "data/")) and path.endswith(".json")
        and path.count("/") == 1
    )


def export(out: Path) -> tuple[int, int]:
    """Write every generated file under `out`; returns (written or changed, removed)."""
    files = generate()
    changed = removed = 0
    for old in sorted(out.rglob("*")):
        rel = old.relative_to(out).as_posix()
        if old.is_file() and is_generated(rel) and rel not in files:
            old.unlink()
            removed += 1
    for rel, text in files.items():
        path = out / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed += 1
    return changed, removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "schemas",
        help="folder to write (default: schemas/ of this checkout)",
    )
    args = parser.parse_args(argv)
    changed, removed = export(args.out)
    print(f"{args.out}: {changed} file(s) written, {removed} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
