"""The offsets page's FastAPI app, mounted by the API server at ``/copycat`` (see :mod:`.offsets_plugin`).

* ``GET /copycat/offsets`` -- the page (HTML; ``?connector=NAME`` shows one connector);
  ``GET /copycat/offsets.json`` -- the same content as JSON (:func:`.overview.overview`).
  Both need an authenticated user, and show only the connectors the user may read (:class:`Access`):
  those all of whose DAGs the auth manager lets the user read, and a connector no DAG runs (only
  offsets in the store) only to a user who may read every DAG; a run that last moved an offset is
  named only to a user who may read that DAG's runs. A ``dag_id`` query parameter changes nothing.
* ``POST /copycat/offsets`` -- a form (``connector``, ``action`` reset|delete, ``partition`` JSON,
  ``offset`` JSON object for reset, ``force``): the change of the maintenance DAG
  (:func:`airflow_copycat.runtime.offset_admin.guarded_change`), with the same guards. Answers
  the page with a banner (or JSON ``{"ok", "message", "result"}`` when the request accepts
  ``application/json``) and the status: 200 done and read back; 400 invalid request, every bad
  parameter named (a connector the user may not read is an unknown one, and the known ones listed
  are those the user may read); 401 not authenticated; 403 not allowed to edit every DAG that runs
  the connector, or a change the UI's cookie authenticates not posted from the page's own origin;
  409 refused because a run of the connector is queued or running (nothing written), or written
  while a run started (the message says so); 502 the store did not return the new value.

Authentication and authorisation are Airflow's own: the API server's ``GetUserDep`` (the JWT of
the UI's cookie or an ``Authorization: Bearer`` header) and its auth manager's
``is_authorized_dag``. A browser sends the UI's cookie (``SameSite=Lax``) with a form another page
of the same site posts, so a change authenticated by the cookie is accepted only from the page's
own origin (:func:`_refuse_other_origins`): ``Sec-Fetch-Site`` ``same-origin`` (or ``none``), or,
from a browser that sends no ``Sec-Fetch-Site``, an ``Origin`` (else ``Referer``) equal to the
scheme, host and port the request was sent to (as the API server or the reverse proxy in front of
it saw them, or ``[api] base_url``). A request with an ``Authorization: Bearer`` header is an API
client's, which a browser never adds to a cross-origin form: no such check.

The Kafka connection is ``[copycat] kafka_conn_id`` of Airflow's configuration (default
``kafka_default``), read as the operators read it (:class:`~airflow_copycat.hooks.kafka.CopycatKafkaHook`);
its secrets never reach the page, the answers or the log.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from confluent_kafka import KafkaException
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.configuration import conf

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException, ConnectException
from ..hooks.kafka import CopycatKafkaHook
from ..runtime import offset_admin
from ..runtime.offsets import offset_store
from . import catalog
from .catalog import KnownConnector
from ..runtime.lag import sink_lag
from .overview import overview
from .offsets_plugin import URL_PREFIX
from .page import render

log = logging.getLogger(__name__)



def kafka_conn_id() -> str:
    """The Kafka connection whose offset store the page shows: ``[copycat] kafka_conn_id``."""
    return conf.get("copycat", "kafka_conn_id", fallback=CopycatKafkaHook.default_conn_name)


def _worker():
    return CopycatKafkaHook(kafka_conn_id()).worker_config()


class Access:
    """What one user may do with the DAGs, as the API server's auth manager decides
    (``is_authorized_dag``, as Airflow's own routes ask it), each question asked once per request.

    A connector is readable when the user may read (``GET``) every DAG that runs it -- Airflow's UI
    shows a DAG's runs, tasks and XComs only to those who may read that DAG, and a connector's
    offsets are what its DAGs' runs wrote -- and a connector no known DAG runs (offsets in the
    store only) when the user may read every DAG (``details=None``: the auth manager's "all DAGs")."""

    def __init__(self, user) -> None:
        from airflow.api_fastapi.app import get_auth_manager

        self.user = user
        self._manager = get_auth_manager()
        self._answers: dict[tuple[str, str | None, Any], bool] = {}
        self._teams: dict[str, str | None] = {}

    def dag(self, method: str, dag_id: str | None, entity: Any = None) -> bool:
        """Whether the user may ``method`` DAG ``dag_id`` (every DAG when ``None``), or its ``entity``."""
        key = (method, dag_id, entity)
        if key not in self._answers:
            from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

            details = None if dag_id is None else DagDetails(id=dag_id, team_name=self._team(dag_id))
            self._answers[key] = bool(self._manager.is_authorized_dag(
                method=method, access_entity=entity, details=details, user=self.user))
        return self._answers[key]

    def _team(self, dag_id: str) -> str | None:
        if dag_id not in self._teams:
            from airflow.models.dag import DagModel

            self._teams[dag_id] = DagModel.get_team_name(dag_id)
        return self._teams[dag_id]

    def can_read(self, connector: KnownConnector) -> bool:
        """Whether the page may show ``connector`` to the user (see the class)."""
        if not connector.dags:
            return self.dag("GET", None)
        return all(self.dag("GET", d) for d in connector.dags)

    def can_read_runs(self, dag_id: str) -> bool:
        """Whether the user may see the runs (ids, times, results) of DAG ``dag_id``."""
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

        return self.dag("GET", dag_id) and self.dag("GET", dag_id, DagAccessEntity.RUN)

    def cannot_edit(self, dags: list[str]) -> list[str]:
        """The DAGs of ``dags`` the user may not edit (``PUT``)."""
        return [d for d in dags if not self.dag("PUT", d)]


def _content(session, access: Access, only: str | None = None) -> dict[str, Any]:
    """:func:`.overview.overview` for the user of ``access``; 502 naming the store when it cannot be read."""
    worker = _worker()
    store = offset_store(worker)
    try:
        return overview(store, catalog.known_connectors(session), catalog.last_moves(session),
                        catalog.run_counter(session), lambda name, topics: sink_lag(worker, name, topics),
                        only=only, can_read=access.can_read, can_read_runs=access.can_read_runs,
                        can_change=lambda c: not access.cannot_edit(c.dags))
    except (ConnectException, KafkaException) as e:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY,
                            f"cannot read the offsets from {store.describe()}: {e}") from None
    finally:
        store.close()


SAME_ORIGIN_FETCH_SITES = ("same-origin", "none")
"""The ``Sec-Fetch-Site`` values of a request a cookie may authenticate a change of: sent by a page
of the same origin (``none``: the user's own navigation, no page sent it)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str | None) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of a URL or an ``Origin``; ``None`` for ``null`` or anything unparsable."""
    try:
        parts = urlsplit((url or "").strip())
        scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    return (scheme, host, port) if scheme in _DEFAULT_PORTS and host and port else None


def _own_origins(request: Request) -> set[tuple[str, str, int]]:
    """The origins the request was sent to: the scheme and ``Host`` the API server saw, those a reverse
    proxy forwarded (``X-Forwarded-Proto``, ``X-Forwarded-Host``), and ``[api] base_url`` when set."""
    def first(header: str) -> str:  # a proxy chain lists its hops: the first is what the browser sent to
        return (request.headers.get(header) or "").split(",")[0].strip()

    scheme, host = request.url.scheme, request.headers.get("host") or request.url.netloc
    candidates = [f"{scheme}://{host}", conf.get("api", "base_url", fallback=None) or ""]
    if first("x-forwarded-host") or first("x-forwarded-proto"):
        candidates.append(f"{first('x-forwarded-proto') or scheme}://{first('x-forwarded-host') or host}")
    return {o for o in map(_origin, candidates) if o}


def _refuse_other_origins(request: Request) -> None:
    """403 unless a change the UI's cookie authenticates was posted by a page of this origin (see the
    module docstring); a request with an ``Authorization: Bearer`` header is not checked."""
    from fastapi.security.utils import get_authorization_scheme_param

    scheme, credentials = get_authorization_scheme_param(request.headers.get("authorization"))
    if scheme.lower() == "bearer" and credentials:
        return  # what GetUserDep authenticated: a browser never adds this header to a cross-origin form
    how = ("a change authenticated by the Airflow UI's cookie is accepted only from the offsets page itself; "
           "an API client authenticates with an 'Authorization: Bearer' header instead")
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site.strip().lower() in SAME_ORIGIN_FETCH_SITES:
            return
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"refused: the browser says this change was posted from "
                            f"another origin (Sec-Fetch-Site: {site}); {how}")
    origin = request.headers.get("origin")
    header, sent = ("Origin", origin) if origin is not None else ("Referer", request.headers.get("referer"))
    if sent is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "refused: the request says neither where it was posted "
                            f"from (no Sec-Fetch-Site, Origin or Referer header); {how}")
    if _origin(sent) not in _own_origins(request):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"refused: this change was posted from another origin "
                            f"({header}: {sent[:200]}); {how}")


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

    # No requires_access_dag("GET") here: it asks about the DAG of a ?dag_id= parameter, when the page
    # shows connectors of many DAGs; Access filters them per DAG instead.
    @app.get("/offsets", response_class=HTMLResponse)
    def offsets_page(request: Request, user: GetUserDep, session: SessionDep, connector: str | None = None):
        return HTMLResponse(render(_content(session, Access(user), connector), ui=_ui_base(request)))

    @app.get("/offsets.json")
    def offsets_json(user: GetUserDep, session: SessionDep, connector: str | None = None):
        return JSONResponse(json.loads(json.dumps(_content(session, Access(user), connector), default=str)))

    @app.post("/offsets")
    def change_offset(request: Request, user: GetUserDep, session: SessionDep,
                      form: Annotated[dict[str, str], Depends(_form)]) -> Response:
        _refuse_other_origins(request)
        access = Access(user)
        code, message, result = _change(session, access, form)
        ok = code == status.HTTP_200_OK
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"ok": ok, "message": message, "result": result}, status_code=code)
        try:
            content = _content(session, access)
        except HTTPException as e:  # the store is unreadable now: still say what happened to the change
            content = {"store": str(e.detail), "connectors": []}
        page = render(content, ui=_ui_base(request), result={"ok": ok, "message": message})
        return HTMLResponse(page, status_code=code)

    return app


def _change(session, access: Access, form: dict[str, str]) -> tuple[int, str, dict[str, Any] | None]:
    """(status, message, result) of one change request; see the module docstring for the statuses."""
    user = access.user
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
    readable = {n: c for n, c in catalog.known_connectors(session).items() if c.dags and access.can_read(c)}
    known = readable.get(name)  # one the user may not read is unknown: the answer says nothing of it
    if known is None:
        problems.append(ConfigProblem("connector", name or None, (
            "is not run by any deployed DAG nor named in an offsets maintenance task's map (or is run by a DAG "
            "you may not read), so whether it is running cannot be checked (known: "
            f"{', '.join(sorted(readable)) or 'none'})")))
    elif known.kind == "sink":
        problems.append(ConfigProblem("connector", name, "is a sink: its positions live in its destination and "
                                      "its consumer group, not in the offset store"))
    else:
        denied = access.cannot_edit(known.dags)
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
