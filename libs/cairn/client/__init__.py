"""The public Python API: what the CLI, `cairn demo`, the services that need a client, and
other programs use.

    from cairn.client import Client

    async with await Client.connect(study="lung") as c:
        job_id = await c.submit("job.yaml")
        final = await c.wait(job_id, timeout=600)

Modules: `core` (the `Client` session: jobs, studies, sites), `jobrequest` (a job spec as the
coordinator receives it), `results` (a job's files and values), `logs` (worker logs),
`deadletters`, `validation` (running a validation and collecting its result), `timeline`
(a study's history for people).
"""

from cairn.client.core import Client
from cairn.client.deadletters import DeadLetter, delete_message, get_message
from cairn.client.jobrequest import JobRequest
from cairn.client.logs import LogChunk

__all__ = ["Client", "DeadLetter", "JobRequest", "LogChunk", "delete_message", "get_message"]
