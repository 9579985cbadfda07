"""Job-lifetime worker credentials, minted by the site's launcher at launch.

The launcher signs them with its site's signing key (beside the site's credentials, as
`signing.nk`), so no round trip to the hub is needed and a site provisioned the distributed
way can mint them too. A credential expires at the job's timeout (plus a small grace for
the worker's last report) and is cut off by the authority as soon as the worker or its job
ends. It reaches the worker as a secret file, like the study's secrets: the worker learns
only its path (`CAIRN_CREDS_FILE`, and `CAIRN_TLS_CA_FILE` for the CA).
"""

from __future__ import annotations

import time
from pathlib import Path

from cairn import files
from cairn.errors import InvalidInput
from cairn.trust.credentials import mint_worker
from cairn.trust.kitfiles import read_seed
from cairn.trust.nkeyjwt import creds_file_text, read_creds_file

GRACE_S = 30.0
CREDS_SECRET = "CAIRN_CREDS"
CA_SECRET = "CAIRN_TLS_CA"


def worker_secrets(site_creds: str, tls_ca: str | None, *, study: str, job: str, site: str,
                   role: str, attempt: int, launch_id: str, timeout_s: float | None,
                   now: float | None = None) -> dict[str, str]:
    """The secret files that give one worker its credential (and the CA to check the server).

    Raises:
        InvalidInput: the site's credentials or signing key cannot be read.
    """
    creds = Path(site_creds)
    try:
        site_jwt, _ = read_creds_file(creds)
        signing_seed = read_seed(creds.parent / "signing.nk")
        ca_text = files.read_text(tls_ca, limit=files.PEM_FILE_BYTES) if tls_ca else None
    except InvalidInput as exc:
        raise InvalidInput(f"cannot mint a worker credential: {exc.message}", file=exc.file) \
            from None
    t = time.time() if now is None else now
    expires = int(t + (timeout_s or 24 * 3600.0) + GRACE_S)
    jwt, seed = mint_worker(site_jwt=site_jwt, signing_seed=signing_seed, study=study,
                            job=job, site=site, role=role, attempt=attempt, expires=expires,
                            launch_id=launch_id)
    out = {CREDS_SECRET: creds_file_text(jwt, seed)}
    if ca_text is not None:
        out[CA_SECRET] = ca_text
    return out
