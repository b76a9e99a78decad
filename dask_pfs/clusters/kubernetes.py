"""Dask clusters on Kubernetes through the dask-kubernetes operator (``--cluster kubernetes``).

A job asks the operator for a ``DaskCluster`` of its own (``dask_kubernetes.operator.KubeCluster``):
a scheduler pod, worker pods that mount the shared ReadWriteMany claim at the path the pfs driver
sees it at, and a ``DaskAutoscaler`` that lets the scheduler grow and shrink the workers between a
minimum and a maximum as the job's tasks need them.  The cluster is deleted when the job ends.

The pods follow the Helm chart's defaults (``charts/pfs``): the same image with ``dask`` as the
command (its entrypoint is ``pfs``), non-root, read-only root file system with emptyDirs for ``/tmp``
and Dask's local directory, all capabilities dropped, the profiler off (``worker_config.WORKER_ENV``).
The operator (and its CRDs) must be installed; see docs/deploy.md.

dask-kubernetes is an optional dependency (extra ``kubernetes``), imported only to start a cluster.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_pfs.clusters.worker_config import TASKS_PER_WORKER, WORKER_ENV
from dask_pfs.errors import PfsError

if TYPE_CHECKING:
    from dask_kubernetes.operator import KubeCluster

DEFAULT_IMAGE = "ghcr.io/pfs/pfs:0.1.0"  # the chart's image.repository and appVersion
LOCAL_DIRECTORY = "/dask-local"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class KubernetesOptions:
    """What ``--cluster kubernetes`` asks the operator for."""

    claim: str  # a ReadWriteMany PersistentVolumeClaim holding the data
    mount_path: str = "/data"  # where workers mount it: the paths pfs is given must be below it
    image: str = DEFAULT_IMAGE
    namespace: str | None = None  # default: the kube config's current namespace
    name: str | None = None  # DaskCluster name (default: pfs-<random>)
    min_workers: int = 1
    max_workers: int = 4
    threads: int | None = None  # PFS_THREADS in each worker (default: auto-tuned)
    cpu: str | None = None  # requests and limits of each worker, e.g. "2"
    memory: str | None = None  # e.g. "8Gi"
    run_as_user: int = 10001  # the owner of the data (the image's user by default)

    def __post_init__(self) -> None:
        if not self.claim:
            raise ValueError("--cluster kubernetes needs the shared volume's claim (--k8s-claim NAME)")
        if not self.mount_path.startswith("/"):
            raise ValueError(f"the claim's mount path must be absolute, got {self.mount_path!r}")
        if not 0 <= self.min_workers <= self.max_workers or self.max_workers < 1:
            raise ValueError(
                f"workers: need 0 <= minimum <= maximum and maximum >= 1, got {self.min_workers}..{self.max_workers}"
            )
        if self.name is not None and not _NAME.match(self.name):
            raise ValueError(f"cluster name {self.name!r}: lower-case letters, digits and '-', at most 42")


def cluster_resource(opts: KubernetesOptions) -> dict[str, Any]:
    """The ``DaskCluster`` resource the operator is asked to create (``make_cluster_spec`` plus pfs's pods)."""
    from dask_kubernetes.operator import make_cluster_spec

    name = opts.name or f"pfs-{uuid.uuid4().hex[:8]}"
    env = {**WORKER_ENV, **({"PFS_THREADS": str(opts.threads)} if opts.threads else {})}
    size = {k: v for k, v in (("cpu", opts.cpu), ("memory", opts.memory)) if v}
    spec = make_cluster_spec(
        name=name,
        image=opts.image,
        n_workers=opts.min_workers,
        resources={"requests": size, "limits": size} if size else None,
        env=env,
    )
    worker = spec["spec"]["worker"]["spec"]
    (container,) = worker["containers"]
    container["command"] = ["dask"]  # the image's entrypoint is `pfs`
    container["args"] = ["worker", "--nthreads", str(TASKS_PER_WORKER), "--nworkers", "1",
                         "--local-directory", LOCAL_DIRECTORY, *container["args"][1:]]  # fmt: skip
    container["volumeMounts"] = [
        {"name": "data", "mountPath": opts.mount_path},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "dask-local", "mountPath": LOCAL_DIRECTORY},
    ]
    worker["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": opts.claim}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "dask-local", "emptyDir": {}},
    ]
    scheduler = spec["spec"]["scheduler"]["spec"]
    (sched,) = scheduler["containers"]
    sched["command"] = ["dask"]
    sched["args"] = ["scheduler", *sched["args"][1:]]
    sched["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    scheduler["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    for pod, c in ((worker, container), (scheduler, sched)):
        if not c.get("resources"):
            c.pop("resources", None)
        c["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        }
        pod["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": opts.run_as_user,
            "runAsGroup": opts.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        pod["automountServiceAccountToken"] = False  # pfs pods never talk to the Kubernetes API
    return spec


def start_kubernetes_cluster(opts: KubernetesOptions) -> KubeCluster:
    """Create the job's DaskCluster, wait for its scheduler, and turn on adaptive scaling."""
    try:
        from dask_kubernetes.operator import KubeCluster
    except ImportError as exc:
        raise PfsError(
            "--cluster kubernetes needs dask-kubernetes, which is not installed: pip install 'pfs[kubernetes]'"
        ) from exc
    try:
        import kr8s

        kr8s.api(namespace=opts.namespace)  # credentials first: a cluster object that cannot be closed
    except Exception as exc:  # would be retried (and fail noisily) by dask-kubernetes' exit hook
        raise PfsError(f"--cluster kubernetes: could not start a DaskCluster: no Kubernetes API ({exc})") from None
    try:
        cluster = KubeCluster(
            custom_cluster_spec=cluster_resource(opts), namespace=opts.namespace, shutdown_on_close=True, quiet=True
        )
    except Exception as exc:  # no kube config, API unreachable, CRDs missing, pods failing to start
        raise PfsError(f"--cluster kubernetes: could not start a DaskCluster: {exc}") from None
    try:
        cluster.adapt(minimum=opts.min_workers, maximum=opts.max_workers)
    except BaseException:
        cluster.close()
        raise
    return cluster
