"""The offsets page's FastAPI app, mounted by the API server at ``/copycat`` (see :mod:`.offsets_plugin`).

* ``GET /copycat/offsets`` -- the page (HTML; ``?connector=NAME`` shows one connector);
  ``GET /copycat/offsets.json`` -- the same content as JSON (:func:`.overview.overview`).
  Both need an authenticated user allowed to read DAGs (``requires_access_dag("GET")``).
* ``POST /copycat/offsets`` -- a form (``connector``, ``action`` reset|delete, ``partition`` JSON,
  ``offset`` JSON object for reset, ``force``): the change of the maintenance DAG
  (:func:`airflow_copycat.runtime.offset_admin.guarded_change`), with the same guards. Answers
  the page with a banner (or JSON ``{"ok", "message", "result"}`` when the request accepts
  ``application/json``) and the status: 200 done and read back; 400 invalid request, every bad
  parameter named; 401 not authenticated; 403 not allowed to edit every DAG that runs the
  connector; 409 refused because a run of the connector is queued or running (nothing written),
  or written while a run started (the message says so); 502 the store did not return the new value.

Authentication and authorisation are Airflow's own: the API server's ``GetUserDep`` (the JWT of
the UI's cookie or an ``Authorization: Bearer`` header) and its auth manager's
``is_authorized_dag``. The UI's cookie is ``SameSite=Lax``, and a request a browser marks
``Sec-Fetch-Site: cross-site`` is refused too, so another site cannot post a change.

The Kafka connection is ``[copycat] kafka_conn_id`` of Airflow's configuration (default
``kafka_default``), read as the operators read it (:class:`~airflow_copycat.hooks.kafka.CopycatKafkaHook`);
its secrets never reach the page, the answers or the log.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any
from urllib.parse import parse_qs

from confluent_kafka import KafkaException
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.configuration import conf

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException, ConnectException
from ..hooks.kafka import CopycatKafkaHook
from ..runtime import offset_admin
from ..runtime.offsets import offset_store
from . import catalog
from .lag import sink_lag
from .overview import overview
from .offsets_plugin import URL_PREFIX
from .page import render

log = logging.getLogger(__name__)



def kafka_conn_id() -> str:
    """The Kafka connection whose offset store the page shows: ``[copycat] kafka_conn_id``."""
    return conf.get("copycat", "kafka_conn_id", fallback=CopycatKafkaHook.default_conn_name)


def _worker():
    return CopycatKafkaHook(kafka_conn_id()).worker_config()


def _can_edit(user, dags: list[str]) -> list[str]:
    """The DAGs of ``dags`` the user may not edit (``PUT``), as the auth manager decides."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    manager = get_auth_manager()
    return [d for d in dags if not manager.is_authorized_dag(
        method="PUT", details=DagDetails(id=d, team_name=DagModel.get_team_name(d)), user=user)]


def _content(session, user, only: str | None = None) -> dict[str, Any]:
    """:func:`.overview.overview` for ``user``; 502 naming the store when it cannot be read."""
    worker = _worker()
    store = offset_store(worker)
    try:
        return overview(store, catalog.known_connectors(session), catalog.last_moves(session),
                        catalog.run_counter(session), lambda name, topics: sink_lag(worker, name, topics),
                        only=only, can_change=lambda c: not _can_edit(user, c.dags))
    except (ConnectException, KafkaException) as e:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY,
                            f"cannot read the offsets from {store.describe()}: {e}") from None
    finally:
        store.close()


def _ui_base(request: Request) -> str:
    root = str(request.scope.get("root_path") or "")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else ""


async def _form(request: Request) -> dict[str, str]:
    """The posted form (``application/x-www-form-urlencoded``) or a JSON object, as strings."""
    body = await request.body()
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body must be a JSON object")
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in doc.items()}
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def create_app() -> FastAPI:
    """The app; built once, on the first request the API server routes to it."""
    app = FastAPI(title="Copycat offsets", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/offsets", response_class=HTMLResponse, dependencies=[Depends(requires_access_dag("GET"))])
    def offsets_page(request: Request, user: GetUserDep, session: SessionDep, connector: str | None = None):
        return HTMLResponse(render(_content(session, user, connector), ui=_ui_base(request)))

    @app.get("/offsets.json", dependencies=[Depends(requires_access_dag("GET"))])
    def offsets_json(user: GetUserDep, session: SessionDep, connector: str | None = None):
        return JSONResponse(json.loads(json.dumps(_content(session, user, connector), default=str)))

    @app.post("/offsets")
    def change_offset(request: Request, user: GetUserDep, session: SessionDep,
                      form: Annotated[dict[str, str], Depends(_form)]) -> Response:
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise HTTPException(status.HTTP_403_FORBIDDEN, "a change posted from another site is refused")
        code, message, result = _change(session, user, form)
        ok = code == status.HTTP_200_OK
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"ok": ok, "message": message, "result": result}, status_code=code)
        try:
            content = _content(session, user)
        except HTTPException as e:  # the store is unreadable now: still say what happened to the change
            content = {"store": str(e.detail), "connectors": []}
        page = render(content, ui=_ui_base(request), result={"ok": ok, "message": message})
        return HTMLResponse(page, status_code=code)

    return app


def _change(session, user, form: dict[str, str]) -> tuple[int, str, dict[str, Any] | None]:
    """(status, message, result) of one change request; see the module docstring for the statuses."""
    name = str(form.get("connector") or "").strip()
    problems: list[ConfigProblem] = []
    action = partition = offset = None
    try:
        action, partition, offset = offset_admin.parse_request(form.get("action"), form.get("partition"),
                                                               form.get("offset"))
    except ConfigException as e:
        problems += e.problems
    if action == "list":
        problems.append(ConfigProblem("action", "list", "this page lists the offsets itself; post reset or delete"))
    known = catalog.known_connectors(session).get(name)
    if known is None or not known.dags:
        others = sorted(catalog.known_connectors(session))
        problems.append(ConfigProblem("connector", name or None, (
            "is not run by any deployed DAG nor named in an offsets maintenance task's map, so whether it is "
            f"running cannot be checked (known: {', '.join(others) or 'none'})")))
    elif known.kind == "sink":
        problems.append(ConfigProblem("connector", name, "is a sink: its positions live in its destination and "
                                      "its consumer group, not in the offset store"))
    else:
        denied = _can_edit(user, known.dags)
        if denied:
            return (status.HTTP_403_FORBIDDEN, f"changing the offsets of connector {name!r} needs permission to "
                    f"edit DAG(s) {', '.join(denied)}; nothing was written", None)
    if problems:
        return status.HTTP_400_BAD_REQUEST, str(ConfigException(problems, context="the offset request")), None
    force = str(form.get("force") or "").strip().lower() in ("true", "1", "yes", "on")
    store = offset_store(_worker())
    try:
        result = offset_admin.guarded_change(store, name, known.dags, action, partition, offset, force=force,
                                             count=catalog.run_counter(session),
                                             retry="change it again on this page")
    except offset_admin.OffsetChangeRaced as e:
        _record(session, user, e.result, known.dags)
        return status.HTTP_409_CONFLICT, str(e), e.result
    except offset_admin.OffsetChangeRefused as e:
        return status.HTTP_409_CONFLICT, str(e), None
    except ConfigException as e:
        return status.HTTP_400_BAD_REQUEST, str(e), None
    except ConnectException as e:
        return status.HTTP_502_BAD_GATEWAY, str(e), None
    finally:
        store.close()
    _record(session, user, result, known.dags)
    after = offset_admin.compact_json(result["after"])
    return status.HTTP_200_OK, (
        f"{result['action']} of connector {name!r}, partition {offset_admin.compact_json(result['partition'])}: "
        f"before {offset_admin.compact_json(result['before'])}, after {after} (read back from {result['store']}); "
        + ("the next run starts this partition from scratch." if result["after"] is None else
           f"the next run of {', '.join(known.dags)} starts there.")), result


def _record(session, user, result: dict[str, Any], dags: list[str]) -> None:
    """Log the change and add it to Airflow's audit log (Browse -> Audit Log), by user."""
    from airflow.models.log import Log

    who = user.get_name()
    log.info("offsets page: %s %s connector %s, partition %s: %s -> %s in %s", who, result["action"],
             result["connector"], offset_admin.compact_json(result["partition"]),
             offset_admin.compact_json(result["before"]), offset_admin.compact_json(result["after"]), result["store"])
    extra = json.dumps({k: result[k] for k in ("connector", "partition", "before", "after", "store")}, default=str)
    for dag_id in dags:
        session.add(Log(event=f"copycat.offsets.{result['action']}", owner=who, dag_id=dag_id, extra=extra))
    session.commit()
