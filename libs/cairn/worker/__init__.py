"""What job code imports: the worker SDK, its data plane and the round helpers.

    from cairn.worker import Worker, main
    from cairn.worker.rounds import ...

`cairn.worker.sdk` holds the `Worker` session, `cairn.worker.dataplane` the job's data plane
(`cairn.data.<study>.<job>...`), `cairn.worker.rounds` the helpers for round-based algorithms,
`cairn.worker.workflows` the federated strategies a job names in its spec (FedAvg, FedProx,
FedOpt, SCAFFOLD, cyclic, robust aggregation, cross-site evaluation), `cairn.worker.privacy`
the filters on what leaves a site, and `cairn.worker.torch` PyTorch state_dicts on the data
plane (imported on its own; it needs torch).
"""

from cairn.worker.dataplane import Message, RemoteError
from cairn.worker.sdk import Worker, WorkerEnvError, main
from cairn.worker.sync import SyncWorker

__all__ = ["Message", "RemoteError", "SyncWorker", "Worker", "WorkerEnvError", "main"]
