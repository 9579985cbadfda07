"""Every Kubernetes API call the backend makes: each in a thread, bounded, answered as JSON.

`RBAC_RULES` lists exactly these calls as a namespaced Role's rules; the site's Helm chart
grants that Role to the launcher's service account in each study namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from cairn import kube
from cairn.errors import CairnError
from cairn.launcher.backends.errors import LaunchFailed
from cairn.launcher.backends.kubernetes_pod import CONTAINER
from cairn.launcher.backends.kubernetes_watch import NamespaceWatch, PodEvent
from cairn.spec.site import KubernetesCluster

RBAC_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
)
"""The launcher's rights in a study namespace, no more: pods (create, delete, get, list,
watch), pods/log (get), events (list), secrets (create: a worker's secret values, owned by
its pod; never get, so the launcher cannot read a Secret back)."""


class PodApi:
    """The pods (and their logs and events) of one cluster."""

    def __init__(self, cluster: KubernetesCluster, *, timeout_s: float) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._api: Any = None
        self._core: Any = None

    async def connect(self) -> None:
        """Make the client on first use (in a thread: it reads the kubeconfig).

        Raises:
            LaunchFailed: the client cannot be configured (or is not installed).
        """
        if self._api is None:
            try:
                api = await asyncio.to_thread(kube.api_client, self.cluster)
            except CairnError as exc:
                raise LaunchFailed(f"cannot reach the cluster: {exc}") from None
            self._api, self._core = api, kube.core_api(api)

    async def close(self) -> None:
        if self._api is not None:
            api, self._api, self._core = self._api, None, None
            await asyncio.to_thread(api.close)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        assert self._core is not None, "connect() first"
        call: Callable[..., Any] = getattr(self._core, method)
        return await asyncio.to_thread(kube.call, call, *args, timeout_s=self.timeout_s,
                                       **kwargs)

    async def create(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """Raises: Conflict (it exists), or another `CairnError` (see `kube.call`)."""
        created: dict[str, Any] = await self._call("create_namespaced_pod", namespace, pod)
        return created

    async def create_secret(self, namespace: str, secret: dict[str, Any], *,
                            for_pod: str) -> None:
        """The Secret a pod mounts; without it the pod could never start, so it is deleted
        when the Secret cannot be made."""
        try:
            await self._call("create_namespaced_secret", namespace, secret)
        except BaseException:
            await self.delete(namespace, for_pod, 0)
            raise

    async def read(self, namespace: str, name: str) -> dict[str, Any]:
        """Raises: NotFound once it is gone, or another `CairnError`."""
        pod: dict[str, Any] = await self._call("read_namespaced_pod", name, namespace)
        return pod

    async def find(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        found = await self._call("list_namespaced_pod", namespace, label_selector=selector)
        return list(found.get("items") or [])

    async def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The events about a pod; none where there are none, or no right to list them."""
        try:
            listed = await self._call("list_namespaced_event", namespace,
                                      field_selector=f"involvedObject.name={name}")
        except CairnError:
            return []
        return list(listed.get("items") or [])

    async def delete(self, namespace: str, name: str, grace_s: float) -> None:
        """Ask for the pod's deletion (the kubelet: SIGTERM, SIGKILL after `grace_s`)."""
        with contextlib.suppress(CairnError):  # NotFound: gone already
            await self._call("delete_namespaced_pod", name, namespace,
                             grace_period_seconds=max(0, round(grace_s)))

    async def log(self, namespace: str, name: str) -> bytes:
        """The worker container's whole log; empty before it starts or once it is gone."""
        assert self._core is not None, "connect() first"
        try:
            data: bytes = await asyncio.to_thread(
                kube.call_raw, self._core.read_namespaced_pod_log, name, namespace,
                container=CONTAINER, timeout_s=self.timeout_s)
        except CairnError:
            return b""
        return data

    def watch(self, namespace: str, on_event: PodEvent, *, selector: str,
              watch_s: float) -> NamespaceWatch:
        assert self._core is not None, "connect() first"
        return NamespaceWatch(self._core, namespace, on_event, selector=selector,
                              watch_s=watch_s)
