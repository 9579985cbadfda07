"""What a job spec may never carry, and why: the messages a data scientist reads.

A job names only its study; the site's study_runtime.yaml decides data mounts, env, secrets,
images and platform rules (DESIGN.md, Identity and trust). Unknown keys are errors anyway, but
"unknown field 'mounts'" invites a workaround; these messages explain the boundary instead.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from cairn.spec._located import Located
from cairn.yamlfile import PathKey

MOUNTS = (
    "a job cannot name host paths or mounts; the site decides data mounts in its "
    "study_runtime.yaml and grants datasets under $CAIRN_DATA/<dataset>"
)
ENV = (
    "a job cannot set environment variables: CAIRN_* is the worker contract, and the site "
    "sets env in its study_runtime.yaml; pass settings to your code in params"
)
SECRETS = (
    "a job cannot carry secrets or secret references: a job spec is recorded in the "
    "study's event stream; the site resolves secret_env from its study_runtime.yaml at "
    "launch"
)
PLATFORM = (
    "a job cannot choose a platform, backend or node settings; each site decides how it "
    "runs workers (site.yaml backend, study_runtime.yaml platform rules)"
)

# Keys compared after lowercasing and dropping '-' and '_', so hostPath, host_path and
# host-path are one rule.
_RULES: dict[str, str] = {
    **dict.fromkeys(
        (
            "mounts",
            "mount",
            "volumes",
            "volume",
            "volumemounts",
            "hostpath",
            "hostpaths",
            "binds",
            "bind",
            "datasets",
            "dataset",
            "data",
            "workdir",
            "devices",
        ),
        MOUNTS,
    ),
    **dict.fromkeys(("env", "envs", "environment", "envvars", "envfrom"), ENV),
    **dict.fromkeys(
        ("secrets", "secret", "secretenv", "credentials", "password", "token"), SECRETS
    ),
    **dict.fromkeys(
        (
            "platform",
            "backend",
            "docker",
            "kubernetes",
            "k8s",
            "slurm",
            "runtime",
            "nodeselector",
            "tolerations",
            "partition",
            "account",
            "qos",
            "privileged",
            "securitycontext",
            "hostnetwork",
            "network",
            "capabilities",
            "user",
        ),
        PLATFORM,
    ),
}

# Words in a params key that mark a secret value (`db_password`, `apiKey`); whole words, so
# `tokenizer` and `max_tokens` pass.
_SECRET_WORDS = {
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "credential",
    "credentials",
    "privatekey",
    "accesskey",
    "secretkey",
}
_SECRET_PAIRS = {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")}
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def _norm(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def check_forbidden(where: Located, data: Any, path: PathKey = ()) -> None:
    """Refuse forbidden keys anywhere in a job spec, with the reason.

    `params` is the job's own data and is checked only for secret-looking entries; the keys
    of `roles` are role names, not settings, and are left to the name rule.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            sub = (*path, str(key))
            if path == () and key == "params":
                _check_params(where, value, sub)
                continue
            if path != ("roles",):
                reason = _RULES.get(_norm(str(key)))
                if reason is not None:
                    raise where.error(sub, _with_env_detail(reason, value))
            check_forbidden(where, value, sub)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            check_forbidden(where, item, (*path, index))


def _with_env_detail(reason: str, value: Any) -> str:
    if reason is ENV and isinstance(value, dict):
        shadow = sorted(str(k) for k in value if str(k).upper().startswith("CAIRN_"))
        if shadow:
            return f"{', '.join(shadow)} would shadow the worker contract; " + reason
    return reason


def _check_params(where: Located, data: Any, path: PathKey) -> None:
    """Params travel in events forever, so refuse what looks like a secret value."""
    if isinstance(data, dict):
        for key, value in data.items():
            sub = (*path, str(key))
            if looks_secret(str(key)):
                raise where.error(sub, f"{key!r} looks like a secret; " + SECRETS)
            _check_params(where, value, sub)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            _check_params(where, item, (*path, index))
    elif isinstance(data, str) and _PEM.search(data):
        raise where.error(path, "this is a private key; " + SECRETS)


def looks_secret(key: str) -> bool:
    """True for keys such as `password`, `db_password`, `apiKey`, `AWS_SECRET_ACCESS_KEY`."""
    words = [w.lower() for w in _WORD.findall(key)]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))
