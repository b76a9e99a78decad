"""OpenLineage objects for pfs operators: datasets from :class:`~airflow_pfs.lineage.LineageRef`,
the manifest schema on Parquet outputs, and the ``pfs`` run facet with the job's counts.

Imported only from ``get_openlineage_facets_on_complete``, i.e. when the OpenLineage provider
is installed and enabled; the facet's JSON schema ships beside this module.
"""

from __future__ import annotations

from typing import Any

import attr
from airflow.providers.common.compat.openlineage.facet import (
    InputDataset,
    LifecycleStateChange,
    LifecycleStateChangeDatasetFacet,
    OutputDataset,
    OutputStatisticsOutputDatasetFacet,
    RunFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
)
from airflow.providers.openlineage.extractors import OperatorLineage

from operators.schema import SCHEMA

from .lineage import MANIFEST, LineageRef, dataset_name, numbers

FACET_KEY = "pfs"
# A relative reference: the schema ships in this package (there is no public copy to point at).
SCHEMA_URL = "airflow_pfs/pfs_run_facet.schema.json#/$defs/PfsRunFacet"


@attr.define
class PfsRunFacet(RunFacet):
    """What the pfs job did: its engine, counts (entries, files, bytes, errors...), exit code."""

    engine: str
    counts: dict[str, Any] = attr.field(factory=dict)
    exitCode: int | None = attr.field(default=None)  # OpenLineage fields are camelCase
    seconds: float | None = attr.field(default=None)
    dryRun: bool | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def operator_lineage(engine: str, inputs: list[LineageRef], outputs: list[LineageRef], report: dict | None):
    """The ``OperatorLineage`` an operator returns; ``report`` is its result (None if it failed early)."""
    run_facets = {}
    if report is not None:
        run_facets[FACET_KEY] = PfsRunFacet(
            engine=engine,
            counts=numbers(report),
            exitCode=report.get("exit_code"),
            seconds=report.get("seconds"),
            dryRun=report.get("dry_run"),
        )
    return OperatorLineage(
        inputs=[_input(ref) for ref in inputs],
        outputs=[_output(ref) for ref in outputs],
        run_facets=run_facets,
    )


def _facets(ref: LineageRef) -> dict:
    facets: dict[str, Any] = {}
    if ref.kind == MANIFEST:
        facets["schema"] = manifest_schema()
    if ref.dropped:
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=LifecycleStateChange.DROP
        )
    return facets


def _input(ref: LineageRef) -> InputDataset:
    namespace, name = dataset_name(ref.url, ref.storage_options)
    return InputDataset(namespace=namespace, name=name, facets=_facets(ref))


def _output(ref: LineageRef) -> OutputDataset:
    namespace, name = dataset_name(ref.url, ref.storage_options)
    stats = {k: int(v) for k, v in ref.stats.items() if v is not None}
    output_facets: dict[str, Any] = {}
    if stats:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
            rowCount=stats.get("rowCount"), size=stats.get("size"), fileCount=stats.get("fileCount")
        )
    return OutputDataset(namespace=namespace, name=name, facets=_facets(ref), outputFacets=output_facets)


def manifest_schema() -> SchemaDatasetFacet:
    """The manifest's columns, as the Parquet parts store them."""
    return SchemaDatasetFacet(
        fields=[SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in SCHEMA],
    )
