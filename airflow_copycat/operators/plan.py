"""Plan a connector: validate its config, list partitions, make task configs and groups."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, Mapping

from airflow.sdk import BaseOperator

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow < 3.1
    from airflow.exceptions import AirflowFailException

from ..connect.config import ConfigProblem
from ..connect.connector import WINDOW_END_KEY, WINDOW_START_KEY
from ..connect.errors import ConfigException, ConnectException
from ..hooks.database import resolve_db_connection
from ..hooks.kafka import CopycatKafkaHook
from ..hooks.storage import resolve_storage_connections
from ..runtime import connector_config
from ..runtime.connector_config import load_connector_config
from ..runtime.plan import make_plan
from ..hooks.secrets import MasksRenderedSecrets, connector_secrets


class CopycatPlanOperator(MasksRenderedSecrets, BaseOperator):
    """Turns a connector config into a plan (see :mod:`airflow_copycat.runtime.plan`).

    Pushes the whole plan to XCom under key ``plan`` and returns its list of task
    groups, so ``CopycatRunTaskGroupOperator.partial(...).expand(group=plan.output)``
    maps one task instance per group. An invalid config fails this task at once,
    without retries, listing every problem; nothing is submitted to Spark.
    Re-planning is sticky: the previous run's plan keeps partitions on their tasks.

    **Windowed runs.** Per DAG run this operator decides whether the run is *live* (an
    incremental run from the connector's committed offsets, which it moves) or *windowed*
    (copies only the data whose event time lies in the run's data interval
    ``[data_interval_start, data_interval_end)``, keeping the window's own offsets and never
    reading or moving the live ones; see :mod:`airflow_copycat.runtime.windows`). ``window``
    says when:

    * ``"backfill"`` (default): backfill runs (``dag_run.run_type == "backfill"``: the UI's
      backfill dialog, ``airflow backfill create``, ``POST /api/v2/backfills``) are windowed;
      scheduled, manual and asset-triggered runs are live;
    * ``"always"``: every run is windowed (e.g. a DAG that re-imports each interval);
    * ``"never"``: every run is live, backfill runs too.

    A windowed run of a connector that cannot run windows (``window_support()``), of a sink,
    or of a run without a data interval (``schedule=None``, or a timetable whose runs are
    points in time) fails here, saying why; nothing is submitted. Window keys written in the
    connector config itself (``copycat.window.start`` / ``.end``, e.g. templated) always win.

    :param connector_config: the connector config: a dict, Kafka Connect's
        ``{"name": ..., "config": {...}}``, or a path to a JSON/YAML/.properties file. (templated)
    :param kafka_conn_id: Kafka connection (its extra is the client/worker config).
    :param worker_config: extra worker properties overriding the connection's. (templated)
    :param max_tasks: overrides ``tasks.max``. (templated)
    :param max_groups: overrides ``copycat.groups.max``. (templated)
    :param window: which runs are windowed: ``"backfill"`` (default), ``"always"`` or ``"never"``. (templated)
    """

    template_fields: Sequence[str] = ("connector_config", "worker_config", "max_tasks", "max_groups", "window")
    config_fields = ("connector_config",)  # their secrets are masked in the rendered fields
    template_fields_renderers = {"connector_config": "json", "worker_config": "json"}
    ui_color = "#d8e8f8"

    def __init__(
        self,
        *,
        connector_config: dict[str, Any] | str,
        kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
        worker_config: dict[str, Any] | None = None,
        max_tasks: int | None = None,
        max_groups: int | None = None,
        window: str = "backfill",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if window not in WINDOW_MODES and "{{" not in str(window):
            raise ValueError(f"window={window!r}: must be one of {', '.join(WINDOW_MODES)}")
        self.window = window
        self.connector_config = connector_config
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config
        self.max_tasks = max_tasks
        self.max_groups = max_groups

    @cached_property
    def hook(self) -> CopycatKafkaHook:
        return CopycatKafkaHook(self.kafka_conn_id)

    def execute(self, context) -> list[dict]:
        ti = context["ti"]
        raw = load_config_or_fail(self.connector_config, "connector_config")
        connector_secrets(raw)  # masked in this task's log, even in an error message
        raw = resolve_connections_or_fail(raw)
        connector_secrets(raw)  # and the Airflow connections' password and storage options
        worker = self._worker_or_fail(raw)
        try:
            raw = windowed(raw, self.window, context)
            live = not (raw.get(WINDOW_START_KEY) or raw.get(WINDOW_END_KEY))
            # A live run re-plans from the task assignment of the latest earlier *live* run (sticky, and
            # fencing of dropped task ids), never from a backfill's: a window has offsets and
            # transactional ids of its own and needs none. map_indexes=-1 asks for one XCom: without
            # it, include_prior_dates returns a list of every earlier run's.
            previous = ti.xcom_pull(task_ids=self.task_id, key=LIVE_ASSIGNMENT_KEY, include_prior_dates=True,
                                    map_indexes=-1) if live else None
            counts, problems = count_params(max_tasks=self.max_tasks, max_groups=self.max_groups)
            if problems:  # reported with every problem of the config
                problems += connector_config.validate(raw)[2]
                raise ConfigException(problems, context=f"connector {raw.get('name')!r}")
            plan = make_plan(raw, worker, **counts, previous=previous if isinstance(previous, dict) else None)
        except ConfigException as e:
            raise AirflowFailException(str(e)) from None
        tasks = sum(len(g["tasks"]) for g in plan["groups"])
        self.log.info(
            "Planned %s connector %s: %d partition(s), %d task(s) in %d group(s)",
            plan["kind"], plan["connector"], len(plan["partitions"]), tasks, len(plan["groups"]),
        )
        if plan.get("window"):
            w = plan["window"]
            self.log.info("Windowed run over [%s, %s): offsets kept under %s; the live offsets are not touched",
                          w["start"], w["end"], w["offsets_namespace"])
        for o in plan["offsets"]:
            self.log.info("  offset at plan time: %s -> %s", o["partition"], o["offset"])
        ti.xcom_push(key="plan", value=plan)
        if live:
            ti.xcom_push(key=LIVE_ASSIGNMENT_KEY, value=live_assignment(plan))
        return plan["groups"]


    def _worker_or_fail(self, raw: Mapping[str, Any]):
        """The worker config of the Kafka connection and ``worker_config``. A connection the hook refuses
        (a callback not allowlisted...) fails the task at once, named with every problem of the config."""
        try:
            return self.hook.worker_config(self.worker_config)
        except ValueError as e:  # the hook's own refusals: fixed texts naming keys, no values
            problems = [ConfigProblem("kafka_conn_id", self.kafka_conn_id, f"is not usable: {e}"),
                        *connector_config.validate(raw)[2]]
            raise AirflowFailException(str(ConfigException(problems, context=f"connector {raw.get('name')!r}")))


LIVE_ASSIGNMENT_KEY = "live_assignment"
"""XCom key of a live run's task assignment (see :func:`live_assignment`), which the next live run re-plans from."""


def live_assignment(plan: dict[str, Any]) -> dict[str, Any]:
    """The part of a plan the next plan needs as ``previous``: which partitions each task had."""
    return {"connector": plan["connector"],
            "groups": [{"tasks": [{"task": t["task"], "partitions": t["partitions"]} for t in g["tasks"]]}
                       for g in plan["groups"]]}


WINDOW_MODES = ("backfill", "always", "never")


def windowed(raw: dict[str, Any], mode: str, context) -> dict[str, Any]:
    """``raw`` with the window keys of this DAG run's data interval when ``mode`` makes the run
    windowed (see :class:`CopycatPlanOperator`), else ``raw`` unchanged. Raises
    :class:`ConfigException` when it should be windowed but the run has no data interval."""
    if mode not in WINDOW_MODES:
        raise ConfigException([ConfigProblem("window", mode, f"must be one of {', '.join(WINDOW_MODES)}")])
    if raw.get(WINDOW_START_KEY) or raw.get(WINDOW_END_KEY):
        return raw  # the config names its window itself
    run_type = getattr(context["dag_run"], "run_type", None)
    run_type = str(getattr(run_type, "value", run_type) or "")  # a str enum: its value is "backfill"
    if mode == "never" or (mode == "backfill" and run_type != "backfill"):
        return raw
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    why = f"a {run_type or 'DAG'} run with window={mode!r} copies its data interval"
    if start is None or end is None:
        raise ConfigException([ConfigProblem(WINDOW_START_KEY, None, f"{why}, but this run has none "
                                             "(a DAG with schedule=None has no data intervals)")])
    if end <= start:
        raise ConfigException([ConfigProblem(WINDOW_START_KEY, start.isoformat(), f"{why}, but its data interval "
                                             f"[{start.isoformat()}, {end.isoformat()}) is empty: the DAG's "
                                             "timetable makes runs at points in time (e.g. a cron schedule string "
                                             "with CronTriggerTimetable); schedule it with an interval timetable "
                                             "such as CronDataIntervalTimetable, or set window='never'")])
    return dict(raw, **{WINDOW_START_KEY: start.isoformat(), WINDOW_END_KEY: end.isoformat()})


def count_params(**params: Any) -> tuple[dict[str, int | None], list[ConfigProblem]]:
    """Templated counts (``max_tasks=...``): rendered templates are strings; ``None`` or ``""`` means not
    set. Returns the counts and a problem naming each parameter that is not an integer (its count ``None``)."""
    counts: dict[str, int | None] = {}
    problems: list[ConfigProblem] = []
    for name, value in params.items():
        try:
            counts[name] = None if value in (None, "") else int(value)
        except (TypeError, ValueError):
            counts[name] = None
            problems.append(ConfigProblem(name, value, "must be an integer"))
    return counts, problems


_SET_BY_CONNECTIONS = {"airflow.conn.id", "connection.url", "connection.user", "connection.password"}
"""Keys an Airflow database connection sets or names: a config whose connection could not be resolved
has no say on them."""


def resolve_connections_or_fail(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with its Airflow connections resolved (``airflow.conn.id``; storage URLs naming a
    connection). When one cannot be, the task fails at once (``AirflowFailException``) naming that
    problem together with every validation problem of the rest of the config -- not of the keys the
    connections would have set, nor of those the connection problems name."""
    problems: list[ConfigProblem] = []
    out = dict(raw)
    for resolve in (resolve_db_connection, resolve_storage_connections):
        try:
            out = resolve(out)
        except ConfigException as e:
            problems += e.problems
    if problems:
        named = _SET_BY_CONNECTIONS | {p.key for p in problems}
        problems += [p for p in connector_config.validate(out)[2] if p.key not in named]
        raise AirflowFailException(str(ConfigException(problems, context=f"connector {raw.get('name')!r}")))
    return out


def load_config_or_fail(source: Any, param: str) -> dict[str, Any]:
    """The flat config of operator parameter ``param`` (a dict, JSON text or a file path); a config
    that cannot be read fails the task at once (``AirflowFailException``: a retry reads the same)."""
    try:
        return load_connector_config(source)
    except (ConnectException, ValueError) as e:  # no such file, not JSON/YAML, not a mapping
        raise AirflowFailException(f"{param} cannot be read: {type(e).__name__}: {e}") from None
