"""What Airflow's metadata database knows about copycat connectors, read in the API server the
way its own routes read it (SQLAlchemy on the session of the request; no Task SDK there).

* :func:`known_connectors` -- every connector the deployed DAGs run, and which DAGs run it, from
  the latest serialized version of each active DAG: the connector configs of the plan tasks
  (``connector_task_group``), and the connector -> DAGs maps of the offsets maintenance tasks
  (``CopycatOffsetsOperator(connector_dags=...)``), so a change from the UI is guarded by at least
  the DAGs the maintenance DAG names.
* :func:`last_moves` -- per connector and source partition, the last finished *live* run that
  moved the partition's offset, from the XCom of the finish tasks (the run summary of
  :func:`airflow_copycat.runtime.result.summarize`). Only what is still in the metadata
  database: the newest :data:`FINISH_RESULTS_SCANNED` finish results; a change made with
  ``copycat offsets``, the maintenance DAG or the offsets page is not a run and is not listed.
* :func:`run_counter` -- ``count(dag_id, state)`` for
  :func:`airflow_copycat.runtime.offset_admin.guarded_change`, the query of the execution API's
  ``get_dr_count`` that the maintenance task asks through the Task SDK.

Connector configs may hold secrets: only the name, the class's kind and a sink's topics are
taken from them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from ..connect.assignment import canonical
from ..runtime.connector_config import load_connector_config
from ..runtime.kafka import sink_topics
from ..runtime.offset_admin import RunCounter

log = logging.getLogger(__name__)

PLAN_OPERATOR = "CopycatPlanOperator"
FINISH_OPERATOR = "CopycatFinishOperator"
OFFSETS_OPERATOR = "CopycatOffsetsOperator"

FINISH_RESULTS_SCANNED = 500
"""How many of the newest finish-task results :func:`last_moves` reads."""


@dataclass
class KnownConnector:
    """A connector the deployed DAGs run: its ``name``, ``kind`` (``source``, ``sink``, or ``None``
    when its class cannot be loaded here), the ``dags`` whose runs use its offsets (sorted), and,
    for a sink, the ``topics`` it reads (``[]`` for a ``topics.regex`` sink)."""

    name: str
    kind: str | None = None
    dags: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)


_extracted: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
"""(dag_id, dag_hash) -> what :func:`_extract` found in that version: parsed once per version."""


def known_connectors(session: Session) -> dict[str, KnownConnector]:
    """Connector name -> :class:`KnownConnector`, from the serialized DAGs of active DAGs."""
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel

    dag_ids = list(session.scalars(select(DagModel.dag_id).where(DagModel.is_stale.is_(False))))
    out: dict[str, KnownConnector] = {}
    for row in SerializedDagModel.get_latest_serialized_dags(dag_ids=dag_ids, session=session):
        key = (row.dag_id, row.dag_hash)
        if key not in _extracted:
            _extracted[key] = _extract(row.data or {})
        for name, facts in _extracted[key]:
            known = out.setdefault(name, KnownConnector(name))
            for dag_id in facts.get("dags", [row.dag_id]):
                if dag_id not in known.dags:
                    known.dags.append(dag_id)
            known.kind = known.kind or facts.get("kind")
            known.topics = known.topics or facts.get("topics", [])
    for known in out.values():
        known.dags.sort()
    return out


def _extract(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(connector name, facts) pairs of one serialized DAG: a plan task gives its connector (facts:
    kind, topics; the DAG itself runs it), an offsets task each entry of its map (facts: dags)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for task in (data.get("dag") or {}).get("tasks") or []:
        var = task.get("__var", task) if isinstance(task, dict) else {}
        task_type = var.get("task_type") or var.get("_task_type")
        if task_type == PLAN_OPERATOR and isinstance(var.get("connector_config"), dict):
            facts = _plan_facts(var["connector_config"])
            if facts:
                found.append(facts)
        elif task_type == OFFSETS_OPERATOR and isinstance(var.get("connector_dags"), dict):
            for name, dags in var["connector_dags"].items():
                if isinstance(dags, list) and "{{" not in str(name):
                    found.append((str(name), {"dags": [str(d) for d in dags]}))
    return found


def _plan_facts(config: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    try:
        flat = load_connector_config(dict(config))
    except Exception:  # a config only its templates make valid: its name is unknown until a run renders it
        return None
    name = str(flat.get("name") or "")
    if not name or "{{" in name:
        return None
    facts: dict[str, Any] = {"kind": _kind(str(flat.get("connector.class") or ""))}
    if facts["kind"] == "sink":
        facts["topics"] = sink_topics(flat)[0]
    return name, facts


def _kind(connector_class: str) -> str | None:
    from ..runtime import plugins

    try:
        return plugins.connector_kind(plugins.resolve_connector(connector_class))
    except Exception:  # a third-party class not installed in the API server, a missing extra
        return None


@dataclass
class Move:
    """The last finished live run that moved one partition's offset: the DAG run, when its finish
    task recorded it, the offsets before and after, and how many records it copied."""

    dag_id: str
    run_id: str
    when: Any
    before: Any
    after: Any
    records: int


def last_moves(session: Session) -> dict[str, dict[str, Move]]:
    """Connector -> canonical partition -> :class:`Move`, from the newest finish results.
    Windowed (backfill) runs are left out: they never move the live offsets."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel

    stmt = (
        select(XComModel.dag_id, XComModel.run_id, XComModel.value, XComModel.timestamp)
        .join(TaskInstance, and_(TaskInstance.dag_id == XComModel.dag_id, TaskInstance.run_id == XComModel.run_id,
                                 TaskInstance.task_id == XComModel.task_id,
                                 TaskInstance.map_index == XComModel.map_index))
        .where(XComModel.key == "return_value", TaskInstance.operator == FINISH_OPERATOR)
        .order_by(XComModel.timestamp.desc())
        .limit(FINISH_RESULTS_SCANNED)
    )
    out: dict[str, dict[str, Move]] = {}
    for dag_id, run_id, value, when in session.execute(stmt):
        summary = _decoded(value)
        if not isinstance(summary, dict) or summary.get("window") or not summary.get("connector"):
            continue
        mine = out.setdefault(str(summary["connector"]), {})
        for p in summary.get("partitions") or []:
            key = canonical(p.get("partition"))
            if key in mine or canonical(p.get("offset_before")) == canonical(p.get("offset_after")):
                continue  # newest first: an older run never replaces a newer one
            mine[key] = Move(dag_id, run_id, when, p.get("offset_before"), p.get("offset_after"),
                             int(p.get("records") or 0))
    return out


def _decoded(value: Any) -> Any:
    while isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value


def run_counter(session: Session) -> RunCounter:
    """``count(dag_id, state)``: the DAG's runs in that state now, from the metadata database."""
    from airflow.models.dagrun import DagRun

    def count(dag_id: str, state: str) -> int:
        return session.scalar(select(func.count()).select_from(DagRun).where(
            DagRun.dag_id == dag_id, DagRun.state == state)) or 0

    return count
