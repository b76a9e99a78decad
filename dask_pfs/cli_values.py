"""Option values the CLI turns into engine objects: ``--cluster kubernetes --k8s-*`` and the job-wide caps.

Kept out of ``dask_pfs.cli`` so that module stays the group and its shared options.
"""

from __future__ import annotations

import click


def kubernetes_options(kind: str, k8s: dict, threads: int | None):
    """``--cluster kubernetes`` and its ``--k8s-*`` options as ``KubernetesOptions`` (else None)."""
    if kind != "kubernetes":
        return None
    from dask_pfs.clusters.kubernetes import DEFAULT_IMAGE, KubernetesOptions

    try:
        return KubernetesOptions(
            claim=k8s["claim"] or "",
            mount_path=k8s["mount"],
            image=k8s["image"] or DEFAULT_IMAGE,
            namespace=k8s["namespace"],
            min_workers=k8s["min_workers"],
            max_workers=k8s["max_workers"],
            threads=threads,
            cpu=k8s["cpu"],
            memory=k8s["memory"],
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cluster kubernetes") from None


def job_limits(ops: float | None, bandwidth: str | None):
    """The job-wide caps as ``operators.ratelimit.Limits``, or None when neither is set."""
    if not ops and not bandwidth:
        return None
    from operators.ratelimit import Limits, parse_bandwidth

    try:
        rate = parse_bandwidth(bandwidth) if bandwidth else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-bandwidth") from None
    return Limits(ops, rate)
