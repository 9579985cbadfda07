"""Downloading a job's results: every file its workers returned, and each result value."""

from __future__ import annotations

import json
from pathlib import Path

from cairn import subjects
from cairn.bus import Bus, Objects, job_files, objects
from cairn.errors import NotFound
from cairn.state.job import JobState


async def fetch_results(bus: Bus, job: JobState, dest: str | Path) -> list[Path]:
    """Write `<dest>/<role>@<site>[-<rank>]/<file>` for every result file (digest-checked)
    and `result.json` for every result value; returns the paths written."""
    store = job_files(bus, job.study, job.job)
    older: Objects | None = None
    written: list[Path] = []
    for result in job.results:
        label = f"{result.role}@{result.site}" + (f"-{result.rank}" if result.rank else "")
        folder = Path(dest) / label
        folder.mkdir(parents=True, exist_ok=True)
        for f in result.files:
            # Only the base name: a worker cannot write outside the result folder.
            path = folder / (Path(f.name).name or f.digest)
            try:
                await store.get_file(f.digest, path, digest=f.digest)  # streamed to disk
            except NotFound:
                # Jobs run before job files existed kept results in the study's artifacts.
                older = older or await objects(bus, subjects.obj_artifacts(job.study))
                await older.get_file(f.digest, path, digest=f.digest)
            written.append(path)
        if result.value is not None:
            path = folder / "result.json"
            path.write_text(json.dumps(result.value, indent=2, default=str) + "\n")
            written.append(path)
    return written
