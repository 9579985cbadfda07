"""The official `kubernetes` client, configured from a site.yaml's `kubernetes:` section.

Shared by the Kubernetes launcher backend and the snapshotter's cluster collector, so both
reach the cluster the same way. The client is an optional dependency (`pip install
cairn[kubernetes]`); it is imported only here, and only when a site uses Kubernetes.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.errors import (
    CairnError,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    Timeout,
    Unavailable,
)
from cairn.spec.site import KubernetesCluster

__all__ = ["api_client", "call", "call_raw", "core_api"]


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise Unavailable("a Kubernetes site needs the Python package 'kubernetes': "
                          "pip install 'cairn[kubernetes]'") from exc


def api_client(cluster: KubernetesCluster | None) -> Any:
    """A `kubernetes.client.ApiClient` for the cluster that `cluster` describes.

    Raises:
        InvalidInput: the kubeconfig, token or CA file cannot be read or used.
        Unavailable: the `kubernetes` package is not installed.
    """
    client = _module("kubernetes.client")
    config = _module("kubernetes.config")
    cluster = cluster or KubernetesCluster()
    configuration = client.Configuration()
    try:
        if cluster.api_url is not None:
            configuration.host = cluster.api_url.rstrip("/")
            if cluster.token_file is not None:
                token = Path(cluster.token_file).read_text(encoding="utf-8").strip()
                configuration.api_key = {"authorization": f"Bearer {token}"}
            if cluster.ca_file is not None:
                configuration.ssl_ca_cert = cluster.ca_file
        elif cluster.in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=cluster.kubeconfig, context=cluster.context,
                                    client_configuration=configuration)
    except OSError as exc:
        raise InvalidInput(f"cannot read {exc.filename}: {exc.strerror}",
                           field="kubernetes") from None
    except config.ConfigException as exc:
        raise InvalidInput(f"the Kubernetes client configuration is unusable: {exc}",
                           field="kubernetes") from None
    return client.ApiClient(configuration)


def core_api(api: Any) -> Any:
    """The core/v1 API (pods, events, nodes, namespaces) of an `ApiClient`."""
    return _module("kubernetes.client").CoreV1Api(api)


def call(method: Callable[..., Any], *args: Any, timeout_s: float, **kwargs: Any) -> Any:
    """`method(*args, **kwargs)` of a client API, bounded by `timeout_s`; its body as JSON.

    Cairn reads API objects as plain JSON rather than the client's generated models: those
    validate every field on the way in, and one field a server fills differently (an older
    server, a proxy, a test double) would fail the whole read.

    Raises:
        NotFound: 404.  Conflict: 409.  PermissionDenied: 401, 403.  InvalidInput: 400, 422.
        Timeout: no answer within `timeout_s`.  Unavailable: no connection, or a 5xx.
    """
    return json.loads(call_raw(method, *args, timeout_s=timeout_s, **kwargs) or b"null")


def call_raw(method: Callable[..., Any], *args: Any, timeout_s: float, **kwargs: Any) -> bytes:
    """As `call`, the body as bytes (a pod log)."""
    exceptions = _module("kubernetes.client.exceptions")
    urllib3 = _module("urllib3.exceptions")
    try:
        response = method(*args, _request_timeout=timeout_s, _preload_content=False, **kwargs)
        data: bytes = response.data
        return data
    except exceptions.ApiException as exc:
        raise _api_error(exc) from None
    except urllib3.TimeoutError:
        raise Timeout(f"the Kubernetes API did not answer within {timeout_s:g} s") from None
    except (urllib3.HTTPError, OSError) as exc:
        raise Unavailable(f"the Kubernetes API cannot be reached: {exc}") from None


def _api_error(exc: Any) -> CairnError:
    """The API's own `Status` message, as the error a Cairn caller expects."""
    message = str(exc.reason or "")
    try:
        status = json.loads(exc.body or b"{}")
        message = str(status.get("message") or message)
    except (ValueError, AttributeError):
        pass
    code = int(exc.status or 0)
    text = f"Kubernetes API {code}: {message}"
    if code == 404:
        return NotFound(text)
    if code == 409:
        return Conflict(text)
    if code in (401, 403):
        return PermissionDenied(text)
    if code in (400, 422):
        return InvalidInput(text)
    return Unavailable(text)
