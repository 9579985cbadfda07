"""The seam between the Slurm backend and a cluster: four calls, two implementations.

    CliDriver    sbatch / squeue --json / sacct / scancel on this host (a login node)
    RestDriver   slurmrestd v0.0.38 with a JWT, over a unix socket or TCP (off the login node)

A driver raises `SlurmUnavailable` when the cluster cannot be asked (a timeout, a refused
connection, a controller that is down) and `LaunchFailed` when Slurm refuses a job; every call
is bounded by the driver's timeout.
"""

from __future__ import annotations

from typing import Protocol

from cairn.errors import Unavailable
from cairn.launcher.backends.slurm.script import JobRequest
from cairn.launcher.backends.slurm.states import JobStatus


class SlurmUnavailable(Unavailable):
    """The cluster could not be asked (the controller or slurmrestd did not answer in time)."""


class SlurmDriver(Protocol):
    """How the backend submits, looks at and cancels batch jobs."""

    name: str

    async def submit(self, request: JobRequest, script_path: str) -> str:
        """Submit the batch job; returns Slurm's job id. `script_path` holds `request.script`."""
        ...

    async def jobs(self) -> dict[str, JobStatus]:
        """Every job the controller remembers, by job id (one call for all watches)."""
        ...

    async def accounting(self, job_id: str) -> JobStatus | None:
        """The job from slurmdbd, once the controller forgot it; None when unknown there too
        (or when the cluster keeps no accounting)."""
        ...

    async def cancel(self, job_id: str, signal: str | None = None) -> None:
        """`scancel`: with `signal`, only send it to the job's processes."""
        ...

    async def close(self) -> None:
        ...
