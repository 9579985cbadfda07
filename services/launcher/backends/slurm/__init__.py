"""The Slurm launcher backend: workers as batch jobs, through the CLI or slurmrestd.

    load_backend("slurm", workdir="/shared/cairn/site-a", driver="rest",
                 url="unix:/run/slurmrestd.sock", user="cairn", token_file="/etc/cairn/jwt")
"""

from cairn.launcher.backends.slurm.backend import SlurmBackend
from cairn.launcher.backends.slurm.cli import CliDriver
from cairn.launcher.backends.slurm.driver import SlurmDriver, SlurmUnavailable
from cairn.launcher.backends.slurm.rest import RestDriver, mint_token
from cairn.launcher.backends.slurm.script import JobRequest, build_request
from cairn.launcher.backends.slurm.states import JobStatus, classify

__all__ = [
    "CliDriver",
    "JobRequest",
    "JobStatus",
    "RestDriver",
    "SlurmBackend",
    "SlurmDriver",
    "SlurmUnavailable",
    "build_request",
    "classify",
    "mint_token",
]
