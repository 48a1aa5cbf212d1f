"""The offsets page (airflow_copycat/plugins) in Airflow's own API app: ``create_app()`` of the API
server, with the plugin loaded through its ``airflow.plugins`` entry point, its real simple auth
manager (users logging in at ``/auth/token``), the real metadata DB (DAGs synced from the dags
folder as the DAG processor syncs them, real DagRun rows) and the session's real broker -- driven
through FastAPI's TestClient instead of a socket.

What a user notices: who may look and who may change -- a user sees only the connectors of the DAGs
they may read (a test-only auth manager gives per-DAG read permissions, as FAB can), and a change
the UI's cookie authenticates is accepted only from the page's own origin; the offsets, the runs that moved them and a
sink's lag on the page; a change refused while a run of the connector is queued or running and
accepted after, read back from the offset topic; a bad request naming every bad parameter; the
Kafka connection's password nowhere.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import uuid
from pathlib import Path

import pendulum
import pytest

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


from .conftest import AIRFLOW_HOME, DAGS_FOLDER

pytestmark = pytest.mark.slow

REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"
A = {"filename": "/var/log/app/a.log"}
B = {"filename": "/var/log/app/b.log"}


def _sync_dags() -> None:
    """What the DAG processor does: every DAG file of the dags folder serialized into the metadata DB."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name),
                       bundle.name, bundle.version)


@pytest.fixture
def deployed():
    """The maintenance DAG and the log-tailing DAG it guards, deployed (files synced to the DB)."""
    shutil.copy(REPO_DAGS / "copycat_offsets.py", DAGS_FOLDER / "copycat_offsets.py")
    shutil.copy(REPO_DAGS / "logs_to_kafka.py", DAGS_FOLDER / "logs_to_kafka.py")
    (DAGS_FOLDER / "connectors").mkdir(exist_ok=True)
    shutil.copy(REPO_DAGS / "connectors" / "app-logs.json", DAGS_FOLDER / "connectors" / "app-logs.json")
    _sync_dags()


class Api:
    """The API server's app with a logged-in client per user."""

    def __init__(self, app):
        from fastapi.testclient import TestClient

        self.client = TestClient(app)
        self.tokens: dict[str, str] = {}

    def login(self, user: str) -> dict[str, str]:
        if user not in self.tokens:
            passwords = json.loads((AIRFLOW_HOME / "simple_auth_manager_passwords.json.generated").read_text())
            r = self.client.post("/auth/token", json={"username": user, "password": passwords[user]})
            assert r.status_code in (200, 201), r.text
            self.tokens[user] = r.json()["access_token"]
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def page(self, user: str = "admin", **params):
        return self.client.get("/copycat/offsets", headers=self.login(user), params=params)

    def content(self, user: str = "admin", **params) -> dict:
        r = self.client.get("/copycat/offsets.json", headers=self.login(user), params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def change(self, user: str = "admin", **form):
        return self.client.post("/copycat/offsets", headers=self.login(user), data=form)


    def cookie(self, user: str = "admin") -> dict[str, str]:
        """The headers of a browser logged in to the UI: its ``_token`` cookie, no ``Authorization``."""
        return {"Cookie": f"_token={self.login(user).pop('Authorization').split(' ', 1)[1]}"}


def _api(monkeypatch, users: str, auth_manager: str | None = None):
    from airflow.api_fastapi.app import create_app, purge_cached_app

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", users)
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", uuid.uuid4().hex)
    if auth_manager:
        monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", auth_manager)
    purge_cached_app()
    yield Api(create_app("core"))
    purge_cached_app()


@pytest.fixture
def api(monkeypatch, worker):
    """Airflow's API app (core: the public API, the UI's routes, the auth manager and plugins), with
    users ``admin`` (role admin) and ``viewer`` (role viewer) of the simple auth manager."""
    yield from _api(monkeypatch, "admin:admin,viewer:viewer")


UNREADABLE = {"reader": {"copycat_demo", "copycat_jdbc_import", "copycat_jdbc_discovery"}}
READS = {"partial": {"copycat_logs_to_kafka"}}
"""Who may read which DAGs, for :class:`PerDagAuthManager`: ``reader`` every DAG but the ones that run the
demo's and the shop's connectors (other tests of the session may have deployed DAGs that run app-logs too),
``partial`` only one of app-logs' two DAGs."""


class PerDagAuthManager(SimpleAuthManager):
    """The simple auth manager, but the users of :data:`READS` may read only their DAGs (and change
    none), as FAB's per-DAG permissions allow -- a rule the simple auth manager cannot express."""

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if user.get_name() in UNREADABLE:
            return method == "GET" and details is not None and details.id not in UNREADABLE[user.get_name()]
        if user.get_name() in READS:
            return method == "GET" and details is not None and details.id in READS[user.get_name()]
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


@pytest.fixture
def per_dag_api(monkeypatch, worker):
    """:func:`api` with :class:`PerDagAuthManager`: ``admin``, and ``reader`` and ``partial`` (role viewer)."""
    yield from _api(monkeypatch, "admin:admin,reader:viewer,partial:viewer", f"{__name__}.PerDagAuthManager")


@pytest.fixture
def run_of():
    """``run_of(dag_id, state)``: a real DagRun of a deployed DAG; ``.set(state)`` changes it; deleted after."""
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    created = []

    class Run:
        def __init__(self, dag_id, run_id):
            self.dag_id, self.run_id = dag_id, run_id

        def set(self, state: str) -> None:
            with create_session() as session:
                session.query(DagRun).filter_by(dag_id=self.dag_id, run_id=self.run_id).one().state = state

    def make(dag_id: str, state: str) -> Run:
        now = pendulum.now("UTC")
        run_id = f"manual__page_{uuid.uuid4().hex[:8]}"
        with create_session() as session:
            SerializedDagModel.get_dag(dag_id, session=session).create_dagrun(
                run_id=run_id, logical_date=now, data_interval=(now.subtract(hours=1), now), run_after=now,
                run_type=DagRunType.MANUAL, state=state, triggered_by=DagRunTriggeredByType.TEST, session=session)
        created.append(Run(dag_id, run_id))
        return created[-1]

    yield make
    with create_session() as session:
        for run in created:
            session.query(DagRun).filter_by(dag_id=run.dag_id, run_id=run.run_id).delete()


def _shown(response) -> str:
    """The text a browser shows of an HTML answer (entities decoded)."""
    return html.unescape(response.text)


def _offsets(store) -> dict:
    return {json.dumps(e["partition"], sort_keys=True): e["offset"] for e in store.read("app-logs").values()}


def test_no_one_unauthenticated_sees_or_changes_offsets_and_a_viewer_cannot_change(api, deployed, store):
    store.write("app-logs", [(A, {"position": 700})])
    # Without a token: 401, for the page, its JSON and a change
    assert api.client.get("/copycat/offsets").status_code == 401
    assert api.client.get("/copycat/offsets.json").status_code == 401
    posted = api.client.post("/copycat/offsets", data={"connector": "app-logs", "action": "delete",
                                                      "partition": json.dumps(A)})
    assert posted.status_code == 401
    # A viewer sees the offsets, is offered no change, and a change posted anyway is forbidden
    page = api.page("viewer")
    assert page.status_code == 200 and '{"filename":"/var/log/app/a.log"}' in _shown(page)
    (row,) = [c for c in api.content("viewer")["connectors"] if c["name"] == "app-logs"]
    assert not row["changeable"] and "permission to edit" in row["why_not"]
    refused = api.change("viewer", connector="app-logs", action="delete", partition=json.dumps(A))
    assert refused.status_code == 403 and "nothing was written" in _shown(refused)
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700}}


def test_a_user_sees_only_connectors_all_of_whose_dags_they_may_read(per_dag_api, deployed, store, unique):
    api = per_dag_api
    orphan = f"orphan-{unique}"  # offsets in the store, no DAG: only for those who may read every DAG
    store.write("app-logs", [(A, {"position": 700})])
    store.write("shop-orders", [({"table": "shop.orders"}, {"incrementing": 41})])
    store.write(orphan, [(A, {"position": 5})])
    hidden = ("shop-orders", "shop-tables", "demo-logs-source", orphan, "copycat_jdbc_import", "shop.orders")
    # The admin sees every connector, the store's own included
    shown = {c["name"] for c in api.content()["connectors"]}
    assert {"app-logs", "app-logs-dlq-replay", "shop-orders", orphan} <= shown

    # A user who may read the DAGs of app-logs and of its replay, but not the demo's and the shop's, sees those
    # two and none of the others, whatever DAG the query names (Airflow's own check of a route reads ?dag_id=)
    for params in ({"dag_id": "copycat_logs_to_kafka"}, {}, {"dag_id": "copycat_jdbc_import"}):
        content = api.content("reader", **params)
        names = {c["name"] for c in content["connectors"]}
        assert {"app-logs", "app-logs-dlq-replay"} <= names and not names & set(hidden), (names, params)
        page = api.page("reader", **params)
        assert page.status_code == 200 and "app-logs" in _shown(page)
        for name in hidden:
            assert name not in json.dumps(content) and name not in _shown(page), (name, params)
    assert api.content("reader", connector="shop-orders")["connectors"] == []
    # A user who may read one of app-logs' two DAGs does not see it
    assert api.content("partial", dag_id="copycat_logs_to_kafka")["connectors"] == []
    assert "app-logs" not in _shown(api.page("partial", dag_id="copycat_logs_to_kafka"))

    # A change of a connector the user cannot see is an unknown connector, and the answer names none
    # of the connectors they cannot see
    everyone = {"app-logs", "app-logs-dlq-replay", "demo-logs-source", "shop-orders", "shop-tables", orphan}
    visible = {"reader": {"app-logs", "app-logs-dlq-replay"}, "partial": set()}
    for user, name in (("reader", "shop-orders"), ("reader", orphan), ("partial", "app-logs")):
        refused = api.client.post("/copycat/offsets", headers={**api.login(user), "Accept": "application/json"},
                                  data={"connector": name, "action": "delete", "partition": json.dumps(A)})
        assert refused.status_code == 400, refused.text
        message = refused.json()["message"]
        assert f"connector={name!r}" in message
        known = message.replace(f"connector={name!r}", "")
        named = {n for n in everyone if f" {n}," in known or f" {n})" in known or f"'{n}'" in known}
        assert named == visible[user], (user, name, message)
        page = api.change(user, connector=name, action="delete", partition=json.dumps(A))
        assert page.status_code == 400
        for other in hidden:
            if other != name:
                assert other not in _shown(page), (user, name, other)
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700}}


def _post_as_browser(api, headers: dict[str, str], **form):
    return api.client.post("/copycat/offsets", headers={**api.cookie("admin"), **headers}, data=form)


def test_a_change_posted_with_the_ui_cookie_must_come_from_the_page_itself(api, deployed, store, monkeypatch):
    store.write("app-logs", [(A, {"position": 700}), (B, {"position": 90})])
    delete_a = {"connector": "app-logs", "action": "delete", "partition": json.dumps(A)}
    # Refused, nothing written: from another site, from a sibling subdomain (same site, another origin),
    # from a foreign origin or page when the browser sends no Sec-Fetch-Site, and with nothing to tell
    for headers in ({"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "http://evil.example"}, {"Origin": "http://other.testserver"},
                    {"Origin": "null"}, {"Origin": "https://testserver"}, {"Origin": "http://testserver:8080"},
                    {"Referer": "http://evil.example/copycat/offsets"}, {}):
        refused = _post_as_browser(api, headers, **delete_a)
        assert refused.status_code == 403, (headers, refused.text)
        assert "refused" in refused.text and "Authorization: Bearer" in refused.text, refused.text
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700},
                               json.dumps(B, sort_keys=True): {"position": 90}}
    # A POST from the page itself goes through: the browser says same-origin, or, without Sec-Fetch-Site,
    # its Origin (else its Referer) is the page's
    reset = {"connector": "app-logs", "action": "reset", "partition": json.dumps(A)}
    for i, headers in enumerate(({"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
                                 {"Origin": "http://testserver"}, {"Origin": "http://testserver:80"},
                                 {"Referer": "http://testserver/copycat/offsets"})):
        done = _post_as_browser(api, headers, **reset, offset=json.dumps({"position": i}))
        assert done.status_code == 200, (headers, done.text)
    # behind a reverse proxy: the host it forwards, or [api] base_url
    proxied = {"Host": "airflow-api:8080", "X-Forwarded-Host": "airflow.example.com", "X-Forwarded-Proto": "https"}
    done = _post_as_browser(api, {**proxied, "Origin": "https://airflow.example.com"}, **reset,
                            offset='{"position": 10}')
    assert done.status_code == 200, done.text
    assert _post_as_browser(api, {"Host": "airflow-api:8080", "Origin": "https://airflow.example.com"},
                            **reset, offset='{"position": 11}').status_code == 403
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    done = _post_as_browser(api, {"Host": "airflow-api:8080", "Origin": "https://airflow.example.com"},
                            **reset, offset='{"position": 12}')
    assert done.status_code == 200, done.text
    assert _offsets(store)[json.dumps(A, sort_keys=True)] == {"position": 12}
    # An API client authenticating with a bearer token (no cookie a browser would add) needs no such header
    done = api.client.post("/copycat/offsets", headers={**api.login("admin"), "Origin": "http://evil.example"},
                           data={**reset, "offset": '{"position": 13}'})
    assert done.status_code == 200, done.text
    assert _offsets(store)[json.dumps(A, sort_keys=True)] == {"position": 13}


def test_a_reset_is_refused_while_a_run_is_in_progress_then_done_and_read_back(api, deployed, store, run_of,
                                                                              secret, caplog):
    caplog.set_level(logging.DEBUG)
    store.write("app-logs", [(A, {"position": 700}), (B, {"position": 90})])
    # Given the page: app-logs with its offsets, guarded by the DAG that runs it and the DAGs the
    # maintenance DAG's map names for it
    (row,) = [c for c in api.content()["connectors"] if c["name"] == "app-logs"]
    assert row["kind"] == "source" and row["changeable"]
    assert {"copycat_logs_to_kafka", "copycat_dlq_replay"} <= set(row["dags"])
    assert [(o["partition"], o["offset"]) for o in row["offsets"]] == [(A, {"position": 700}), (B, {"position": 90})]

    # When a run of the connector's DAG is queued, the page says so, and a reset is refused, nothing written
    run = run_of("copycat_logs_to_kafka", "queued")
    (row,) = api.content(connector="app-logs")["connectors"]
    assert row["runs_in_progress"] == {"copycat_logs_to_kafka": {"queued": 1}} and not row["changeable"]
    refused = api.change(connector="app-logs", action="reset", partition=json.dumps(A), offset='{"position": 0}')
    assert refused.status_code == 409
    assert "refusing to change offsets of connector" in _shown(refused) and "1 queued" in _shown(refused)
    assert _offsets(store)[json.dumps(A, sort_keys=True)] == {"position": 700}
    run.set("running")
    assert api.change(connector="app-logs", action="delete", partition=json.dumps(B)).status_code == 409

    # Then, once the run finished, the same reset is done and the page shows what the store returns
    run.set("success")
    done = api.change(connector="app-logs", action="reset", partition=json.dumps(A), offset='{"position": 0}')
    assert done.status_code == 200, done.text
    assert 'before {"position":700}, after {"position":0}' in _shown(done)
    assert _offsets(store)[json.dumps(A, sort_keys=True)] == {"position": 0}
    deleted = api.change(connector="app-logs", action="delete", partition=json.dumps(B))
    assert deleted.status_code == 200 and "starts this partition from scratch" in _shown(deleted)
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 0}}
    (row,) = api.content(connector="app-logs")["connectors"]
    assert [(o["partition"], o["offset"]) for o in row["offsets"]] == [(A, {"position": 0})]
    # and Airflow's audit log says who did it
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    with create_session() as session:
        events = [(e.event, e.owner, e.dag_id) for e in session.query(Log).filter(Log.event.like("copycat.offsets.%"))]
    assert ("copycat.offsets.reset", "admin", "copycat_logs_to_kafka") in events

    # The Kafka connection's password appeared in no answer and no log record
    everything = done.text + deleted.text + refused.text + api.page().text + json.dumps(api.content())
    everything += _shown(done) + _shown(api.page())
    assert secret not in everything
    assert secret not in "\n".join(r.getMessage() for r in caplog.records)


def test_a_bad_request_names_every_bad_parameter_and_changes_nothing(api, deployed, store):
    store.write("app-logs", [(A, {"position": 700})])
    bad = api.change(connector="no-such-connector", action="reset", partition="{not json", offset="[1]")
    assert bad.status_code == 400
    for name in ("connector=", "partition=", "offset="):
        assert name in _shown(bad), bad.text
    typo = api.change(connector="app-logs", action="reset", partition='{"filename": "/var/log/app/typo.log"}',
                      offset='{"position": 1}')
    assert typo.status_code == 400 and "has no committed offset" in _shown(typo)
    answer = api.client.post("/copycat/offsets", headers={**api.login("admin"), "Accept": "application/json"},
                             json={"connector": "app-logs", "action": "shout"})
    assert answer.status_code == 400 and not answer.json()["ok"] and "action=" in answer.json()["message"]
    assert _offsets(store) == {json.dumps(A, sort_keys=True): {"position": 700}}


def test_the_page_shows_the_run_that_moved_an_offset_and_a_sinks_lag(api, store, worker, make_dag, run_dag,
                                                                       tmp_path, unique, kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    from airflow_copycat.runtime.kafka import admin_client

    # Given a DAG tailing a file, which copied five lines in a run
    log_file = tmp_path / "app.log"
    log_file.write_text("".join(f"line {i}\n" for i in range(5)))
    source, topic = f"tail-{unique}", f"page-{unique}"
    tail = make_dag(f"tail_{unique}", {"name": source, "connector.class": "FileStreamSource", "file": str(log_file),
                                       "topic": topic}, in_process=True)
    run = run_dag(tail)
    assert run.state == "success"
    # and a sink DAG reading a topic of 2 partitions (5 + 3 records), its group having committed 2 and 3
    sink, sink_topic = f"sink-{unique}", f"page-in-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(sink_topic, 2)])[sink_topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(8):
        producer.produce(sink_topic, f"r{i}".encode(), partition=0 if i < 5 else 1)
        producer.flush()
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"connect-{sink}", "enable.auto.commit": False})
    group.commit(offsets=[TopicPartition(sink_topic, 0, 2), TopicPartition(sink_topic, 1, 3)], asynchronous=False)
    group.close()
    make_dag(f"sink_{unique}", {"name": sink, "connector.class": "FileStreamSink", "file": str(tmp_path / "out.txt"),
                                "topics": sink_topic})
    _sync_dags()

    content = api.content()
    # Then the source's offset names the run that moved it, from nothing to where it is now
    (row,) = [c for c in content["connectors"] if c["name"] == source]
    assert row["dags"] == [f"tail_{unique}"]
    (offset,) = row["offsets"]
    assert offset["offset"]["position"] == 35
    move = offset["last_move"]
    assert (move["dag_id"], move["run_id"], move["records"], move["current"]) == (f"tail_{unique}", run.run_id, 5, True)
    assert move["after"] == offset["offset"]
    # and the sink shows its group's lag per topic-partition, and no reset form
    (row,) = [c for c in content["connectors"] if c["name"] == sink]
    assert row["kind"] == "sink" and not row["changeable"]
    assert [(r["topic"], r["partition"], r["committed"], r["end"], r["lag"]) for r in row["lag"]] == [
        (sink_topic, 0, 2, 5, 3), (sink_topic, 1, 3, 3, 0)]
    page = _shown(api.page(connector=sink))
    assert f"connect-{sink}" in page and "Reset" not in page
