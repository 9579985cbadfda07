"""The CLI driver: Slurm's own commands on this host, which must be a submit host (login node).

`SLURM_CONF` and `PATH` come from the launcher's environment (or `env`), so one launcher can
drive a cluster whose config is not at the default path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping

from cairn.launcher.backends.errors import LaunchFailed
from cairn.launcher.backends.slurm.driver import SlurmUnavailable
from cairn.launcher.backends.slurm.script import JobRequest
from cairn.launcher.backends.slurm.states import JobStatus, from_job_json, from_sacct_line

SACCT_FIELDS = "JobIDRaw,State,ExitCode,DerivedExitCode,Reason,Comment,NodeList"
# Slurm client variables a launcher's own environment may hold that would change what sbatch
# asks for behind the request's back (SBATCH_PARTITION, SLURM_MEM_PER_NODE...).
_CLIENT_PREFIXES = ("SBATCH_", "SLURM_", "SALLOC_", "SRUN_")


class CliDriver:
    """Drive Slurm through `sbatch`, `squeue --json`, `sacct` and `scancel`.

    Args:
        timeout_s: Bound on each command (Slurm clients retry a lost controller for ~10 s).
        env: Environment for the commands; default the launcher's.
    """

    name = "cli"

    def __init__(self, *, timeout_s: float = 30.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env if env is not None else os.environ)

    async def submit(self, request: JobRequest, script_path: str) -> str:
        # The job's environment is sbatch's (`--export=ALL`): the request's, plus what the
        # Slurm clients themselves need to find the cluster.
        env = dict(request.env)
        if "SLURM_CONF" in self.env:
            env["SLURM_CONF"] = self.env["SLURM_CONF"]
        code, out, err = await self._run(["sbatch", "--parsable", script_path], env=env)
        if code != 0:
            raise LaunchFailed(f"sbatch refused the job: {err.strip() or out.strip()}")
        job_id = out.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise LaunchFailed(f"sbatch answered {out.strip()!r}, not a job id")
        return job_id

    async def jobs(self) -> dict[str, JobStatus]:
        code, out, err = await self._run(["squeue", "--json", "--all"])
        if code != 0:
            raise SlurmUnavailable(f"squeue failed: {err.strip()}")
        try:
            listed = json.loads(out).get("jobs") or []
        except (ValueError, AttributeError) as exc:
            raise SlurmUnavailable(f"squeue --json answered something else: {exc}") from exc
        statuses = (from_job_json(job) for job in listed if isinstance(job, dict))
        return {s.job_id: s for s in statuses}

    async def accounting(self, job_id: str) -> JobStatus | None:
        code, out, err = await self._run(["sacct", "-X", "-P", "-n", "-j", job_id,
                                          "-o", SACCT_FIELDS])
        if code != 0:
            if "accounting storage is disabled" in err.lower():
                return None
            raise SlurmUnavailable(f"sacct failed: {err.strip()}")
        for line in out.splitlines():
            status = from_sacct_line(line)
            if status is not None and status.job_id == job_id:
                return status
        return None

    async def cancel(self, job_id: str, signal: str | None = None) -> None:
        argv = ["scancel", *([f"--signal={signal}", "--full"] if signal else []), job_id]
        code, _, err = await self._run(argv)
        if code != 0 and "already completing or completed" not in err \
                and "Invalid job id" not in err:
            raise SlurmUnavailable(f"scancel {job_id} failed: {err.strip()}")

    async def close(self) -> None:
        return None

    async def _run(self, argv: list[str], *,
                   env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
        run_env = dict(env) if env is not None else {
            k: v for k, v in self.env.items()
            if k == "SLURM_CONF" or not k.startswith(_CLIENT_PREFIXES)}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=run_env)
        except OSError as exc:
            raise SlurmUnavailable(f"{argv[0]} cannot be run here: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SlurmUnavailable(f"{argv[0]} did not answer in {self.timeout_s:g} s "
                                   "(is slurmctld up?)") from None
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
