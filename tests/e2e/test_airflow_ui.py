"""What a user does from outside a real Airflow: backfills of the example DAG ``copycat_jdbc_import`` and
the offsets page, on the real Airflow services (LocalExecutor; the task groups on the session's Spark
Connect server), every test on one running Airflow (``jdbc_airflow``, started once: one file, so one test
process).

* Through Airflow's REST API: each backfill run imports exactly the rows whose ``updated_at``
  lies in its hour, once, and the live offsets of the connector stay where the live run left them.
* From the UI: headless Chromium from Debian (``/usr/bin/chromium``, installed by ``make test``
  through scripts/ensure_browser.sh) driven by Playwright logs in, opens the DAG, opens the
  trigger dialog, chooses "Backfill", fills the date range and submits. The REST API then shows
  the backfill and its runs succeed, and exactly the rows of those hours reach Kafka, once, while
  the live offsets stay where they were. A screenshot of the page is saved under the test's tmp
  dir when anything fails.
* After the live run, the DAG's graph view shows the connector's task group expanded (plan, run,
  finish, each with its state), and the finish task's XCom tab shows the run summary with the
  counts the REST API returns.

The offsets page (airflow_copycat/plugins), seen from the same browser as a user sees it:

* a request without a login is refused (401), and the page is in the UI's navigation;
* after logging in, the page shows shop-orders' committed offsets and the scheduled run that
  moved them;
* a reset from the page is refused while a run of the DAG is queued (created through the REST API
  on the paused DAG, so it stays queued), and goes through once that run is marked failed: the
  offset topic then returns the new value. The original offset is put back afterwards, and the DAG
  unpaused, for the other tests of the session.

Screenshots for the docs (``make screenshots`` saves them into docs/images through
``COPYCAT_SCREENSHOTS``; otherwise they go to each test's tmp dir), each taken only after the test
asserted what it shows: ``graph-task-group.png`` (the expanded task group of a finished run),
``run-summary-xcom.png`` (the finish task's XCom), ``backfill-dialog.png`` (the filled-in dialog,
before it is submitted), ``offsets-page.png`` (shop-orders' committed offsets). The browser's viewport is
1280x900 (the offsets page: 1760x560); a page's picture must hold its whole width.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import struct
import urllib.parse
from pathlib import Path

import httpx
import pytest

from airflow_copycat.runtime.offset_admin import compact_json
from airflow_copycat.runtime.offsets import KafkaOffsetStore
from airflow_copycat.runtime.windows import is_window_namespace
from airflow_copycat.runtime.worker import WorkerConfig
from tests.support.jdbc_airflow import CONNECTOR, DAG_ID, TOPICS, records_since, topic_positions

pytestmark = pytest.mark.slow

FINISH_TASK = f"{CONNECTOR}.finish"
CHROMIUM = os.environ.get("COPYCAT_TEST_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 900}
"""The browser's size, so the screenshots in docs/images have it (the backfill dialog is 826 px high)."""
OFFSETS_VIEWPORT = {"width": 1760, "height": 560}
"""The offsets page's: its table of offsets, runs and forms is about 1,700 px wide, and the page is short."""


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_graph_shows_the_task_group_of_a_run_and_the_finish_xcom_its_summary(jdbc_airflow, tmp_path: Path):
    """The live run (the fixture's), as a user looks at it: the graph with the connector's task group
    expanded, each task in its state; then the finish task's XCom: the run summary."""
    from playwright.sync_api import expect, sync_playwright

    s, run_id = jdbc_airflow.services, jdbc_airflow.live_run_id
    with s.logs_on_failure():
        summary = s.xcom(DAG_ID, run_id, FINISH_TASK)
        assert summary["status"] == "ok" and summary["records"] > 0, summary
        run_url = f"{s.url}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}"
        with sync_playwright() as playwright, _page(playwright, tmp_path, "graph-xcom-failure.png") as page:
            _log_in(page, s.url, s.password)

            # Graph view, task groups expanded: the group and its three tasks, each succeeded
            page.goto(run_url)
            page.get_by_role("button", name="Show Graph (Press g)").click()
            page.get_by_role("button", name="Expand all task groups").click()
            group = page.locator(f".react-flow__node[data-id='{CONNECTOR}']")
            for shown in (CONNECTOR, "Task Group", "success"):
                expect(group).to_contain_text(shown)
            for task, operator in (("plan", "CopycatPlanOperator"), ("run", "CopycatRunTaskGroupOperator"),
                                   ("finish", "CopycatFinishOperator")):
                node = page.locator(f".react-flow__node[data-id='{CONNECTOR}.{task}']")
                for shown in (task, operator, "success"):
                    expect(node).to_contain_text(shown)
                expect(node).to_be_in_viewport()
            _screenshot(page, "graph-task-group.png", tmp_path)

            # The finish task's XCom tab: return_value is the run summary, as the REST API returns it. The
            # editor renders the lines it shows only, and the keys come in the metadata database's order
            # (PostgreSQL's JSONB: shorter keys first), so these are the keys of its first ~16 lines.
            page.goto(f"{run_url}/tasks/{FINISH_TASK}/xcom")
            page.get_by_role("button", name="Show Grid (Press g)").click()  # more room for the XCom table
            expect(page.get_by_text(FINISH_TASK, exact=True).first).to_be_visible()
            entry = page.get_by_role("row").filter(has_text="return_value")
            expect(entry).to_be_visible()
            page.get_by_role("button", name="Expand all extra JSON").click()
            shown = ['"kind": "source"', '"status": "ok"', f'"plan_id": "{summary["plan_id"]}"',
                     f'"records": {summary["records"]}', f'"bytes": {summary["bytes"]}', '"window": null']
            shown += [f'"{topic}": {n}' for topic, n in summary["topics"].items()]
            assert set(summary["topics"]) == set(TOPICS.values()), summary["topics"]
            for text in shown:
                expect(entry).to_contain_text(text)
            expect(entry).to_be_in_viewport()
            _screenshot(page, "run-summary-xcom.png", tmp_path)


def test_backfill_through_rest_api_imports_its_hours_once_and_leaves_live_offsets(jdbc_airflow):
    airflow, s = jdbc_airflow, jdbc_airflow.services
    with s.logs_on_failure():
        s.wait_for_backfills_completed(DAG_ID)  # Airflow allows one active backfill per DAG
        live_before = airflow.offsets()
        assert CONNECTOR in live_before, f"the live run left no offsets: {sorted(live_before)}"
        positions = topic_positions(airflow.bootstrap)
        hours = [airflow.hour(i) for i in (1, 2, 3)]
        expected = {h: airflow.rows_between(h, h + dt.timedelta(hours=1)) for h in hours}
        assert all(expected[h]["orders"] for h in hours), expected

        backfill = s.api("POST", "/backfills", json={
            "dag_id": DAG_ID, "from_date": _iso(hours[0]), "to_date": _iso(hours[-1]), "max_active_runs": 1})
        assert backfill["dag_id"] == DAG_ID

        starts = {_iso(h) for h in hours}
        runs = s.wait_for_runs(DAG_ID, lambda r: r["run_type"] == "backfill" and r["data_interval_start"] in starts,
                               len(hours), timeout=900)
        assert {r["data_interval_start"]: r["state"] for r in runs} == {h: "success" for h in starts}
        for r in runs:  # each run covers one hour of the timetable
            assert _parse(r["data_interval_end"]) - _parse(r["data_interval_start"]) == dt.timedelta(hours=1)
        assert s.api("GET", f"/backfills/{backfill['id']}")["dag_id"] == DAG_ID

        # Kafka: exactly the rows of the three hours arrived, each once
        arrived = records_since(airflow.bootstrap, positions)
        for table, topic in TOPICS.items():
            ids = [v["id"] for v in arrived[topic]]
            want = set().union(*(expected[h][table] for h in hours))
            assert sorted(ids) == sorted(want), f"{topic}: got {sorted(ids)}, want {sorted(want)}"

        # the live offsets were neither moved nor rewritten; the windows' own offsets were deleted
        after = airflow.offsets()
        assert after[CONNECTOR] == live_before[CONNECTOR]
        assert not [name for name in after if is_window_namespace(name)], sorted(after)

        # the finish task's XCom names each run's window and what it copied per table
        for r in runs:
            start = _parse(r["data_interval_start"])
            summary = s.xcom(DAG_ID, r["dag_run_id"], FINISH_TASK)
            assert summary["status"] == "ok", summary
            assert (_parse(summary["window"]["start"]), _parse(summary["window"]["end"])) == (
                start, start + dt.timedelta(hours=1)), summary["window"]
            want = expected[start]
            assert summary["topics"] == {TOPICS[t]: len(want[t]) for t in TOPICS if want[t]}, summary["topics"]
            per_table = {p["partition"]["table"]: p["records"] for p in summary["partitions"]}
            assert per_table == {t: len(want[t]) for t in TOPICS}, summary["partitions"]

        # a rerun of a backfill run (cleared, as from the UI) reads its hour again: the same records
        rerun = runs[1]
        hour = _parse(rerun["data_interval_start"])
        positions = topic_positions(airflow.bootstrap)
        s.api("POST", f"/dags/{DAG_ID}/clearTaskInstances", json={
            "dry_run": False, "dag_run_id": rerun["dag_run_id"], "only_failed": False, "reset_dag_runs": True})
        again = s.wait_for_runs(DAG_ID, lambda r: r["dag_run_id"] == rerun["dag_run_id"], 1, timeout=600)
        assert again[0]["state"] == "success", again
        rerun_records = records_since(airflow.bootstrap, positions)
        for table, topic in TOPICS.items():
            first = [v for v in arrived[topic] if v["id"] in expected[hour][table]]
            assert first, f"no {table} rows in {hour}"
            assert sorted(map(_canonical, rerun_records[topic])) == sorted(map(_canonical, first)), topic
        assert airflow.offsets()[CONNECTOR] == live_before[CONNECTOR]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


# ------------------------------------------------------------------ from the UI


def _browser(playwright):
    """Debian's Chromium, headless; never a browser Playwright downloads."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/ensure_browser.sh (make test does) or set "
                    f"COPYCAT_TEST_CHROMIUM", pytrace=False)
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=["--no-sandbox", "--disable-dev-shm-usage"])


def _new_page(browser, viewport: dict = VIEWPORT):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(60_000)
    return page


@contextlib.contextmanager
def _page(playwright, tmp_path: Path, failure_shot: str, viewport: dict = VIEWPORT):
    """A page of a fresh headless Chromium; if the block fails, a full-page screenshot ``failure_shot`` is
    saved in ``tmp_path`` (its path printed) before the error goes on. The browser closes either way."""
    browser = _browser(playwright)
    try:
        page = _new_page(browser, viewport)
        try:
            yield page
        except BaseException:
            shot = tmp_path / failure_shot
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot of the page: {shot}")
            raise
    finally:
        browser.close()


def _log_in(page, url: str, password: str) -> None:
    """Opens the DAG's page as ``admin``; the login page comes first."""
    page.goto(f"{url}/dags/{DAG_ID}")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**/dags/{DAG_ID}**")


def _screenshot(target, name: str, tmp_path: Path) -> Path:
    """Saves a PNG of ``target`` (a page: its viewport; a locator: that element) as ``name`` in
    ``$COPYCAT_SCREENSHOTS`` (``make screenshots``: docs/images) or else ``tmp_path``, and checks
    that it is a picture of the viewport's or the element's size. Call it after asserting what it shows."""
    folder = Path(os.environ.get("COPYCAT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if hasattr(target, "bounding_box"):
        box = target.bounding_box()
    else:  # a page: the picture holds its whole width, nothing cut off at the right
        box = target.viewport_size
        assert target.evaluate("document.documentElement.scrollWidth") <= box["width"], f"{name}: wider than the page"
    target.screenshot(path=str(path), animations="disabled")
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    size = struct.unpack(">II", head[16:24])
    assert abs(size[0] - box["width"]) <= 1 and abs(size[1] - box["height"]) <= 1, (path, size, box)
    return path


def _pick_datetime(page, dialog, label: str, t: dt.datetime) -> None:
    """Fills one of the backfill dialog's date-time pickers ("From"/"To"; the UI shows UTC)."""
    from playwright.sync_api import expect

    field = dialog.get_by_role("group").filter(has=page.get_by_text(label, exact=True))
    field.get_by_test_id("datetime-input").click()
    popover = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    expect(popover.get_by_text("UTC")).to_be_visible()
    popover.get_by_placeholder("YYYY/MM/DD").fill(t.strftime("%Y/%m/%d"))
    popover.get_by_placeholder("HH:mm").fill(t.strftime("%H:%M"))
    dialog.get_by_text("Date Range").click()  # closes the picker
    expect(popover).to_have_count(0)


def _start_backfill_in_ui(page, url: str, password: str, start: dt.datetime, end: dt.datetime, runs: int,
                          tmp_path: Path) -> None:
    from playwright.sync_api import expect

    _log_in(page, url, password)
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Backfill", exact=True).first.click()
    expect(dialog.get_by_text("Run Backfill").first).to_be_visible()
    _pick_datetime(page, dialog, "From", start)
    _pick_datetime(page, dialog, "To", end)
    # the dialog's dry run counts the runs the range makes
    expect(dialog.get_by_text(f"{runs} runs will be triggered.")).to_be_visible()
    # the dialog itself (the date pickers' closed popovers are dialogs too), filled in, before it is submitted
    shown = page.locator("[role=dialog][data-scope=dialog][data-state=open]")
    expect(shown).to_contain_text(f"Run Backfill - {DAG_ID}")
    expect(shown).to_contain_text(f"{runs} runs will be triggered.")
    expect(shown.get_by_role("button", name="Run Backfill")).to_be_in_viewport()
    _screenshot(shown, "backfill-dialog.png", tmp_path)
    dialog.get_by_role("button", name="Run Backfill").click()
    expect(page.get_by_text("Backfill generated").first).to_be_visible()  # the toast of a created backfill
    expect(page.get_by_text("Backfill in progress")).to_be_visible()


def test_backfill_started_from_the_ui_imports_its_hours(jdbc_airflow, tmp_path: Path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package playwright is missing: uv pip install -e '.[test]'", pytrace=False)
    airflow, s = jdbc_airflow, jdbc_airflow.services
    with s.logs_on_failure():
        s.wait_for_backfills_completed(DAG_ID)  # Airflow allows one active backfill per DAG
        live_before = airflow.offsets()[CONNECTOR]
        positions = topic_positions(airflow.bootstrap)
        hours = [airflow.hour(4), airflow.hour(5)]
        expected = {t: set().union(*(airflow.rows_between(h, h + dt.timedelta(hours=1))[t] for h in hours))
                    for t in TOPICS}
        assert expected["orders"], expected

        with sync_playwright() as playwright, _page(playwright, tmp_path, "backfill-ui-failure.png") as page:
            _start_backfill_in_ui(page, s.url, s.password, hours[0], hours[-1], len(hours), tmp_path)

        # the REST API shows the backfill the UI created, and its runs complete
        backfills = s.api("GET", "/backfills", params={"dag_id": DAG_ID})["backfills"]
        mine = [b for b in backfills if dt.datetime.fromisoformat(b["from_date"].replace("Z", "+00:00")) == hours[0]]
        assert len(mine) == 1, backfills
        assert dt.datetime.fromisoformat(mine[0]["to_date"].replace("Z", "+00:00")) == hours[-1]
        starts = {h.strftime("%Y-%m-%dT%H:%M:%SZ") for h in hours}
        runs = s.wait_for_runs(DAG_ID, lambda r: r["run_type"] == "backfill" and r["data_interval_start"] in starts,
                               len(hours), timeout=900)
        assert {r["data_interval_start"]: r["state"] for r in runs} == {h: "success" for h in starts}

        arrived = records_since(airflow.bootstrap, positions)
        for table, topic in TOPICS.items():
            ids = [v["id"] for v in arrived[topic]]
            assert sorted(ids) == sorted(expected[table]), f"{topic}: got {sorted(ids)}, want {sorted(expected[table])}"
        assert airflow.offsets()[CONNECTOR] == live_before


def _lowered(offset: dict) -> dict:
    """``offset`` with its first integer field one lower: a value the page can set and we can tell apart."""
    key = next(k for k, v in offset.items() if isinstance(v, int) and not isinstance(v, bool))
    return {**offset, key: offset[key] - 1}


def test_the_offsets_page_shows_and_resets_offsets_with_the_runs_guard(jdbc_airflow, tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright


    airflow, s = jdbc_airflow, jdbc_airflow.services
    with s.logs_on_failure():
        # Without a login, nothing: neither the page nor a change
        assert httpx.get(f"{s.url}/copycat/offsets", timeout=30).status_code == 401
        assert httpx.post(f"{s.url}/copycat/offsets", data={"connector": CONNECTOR, "action": "delete",
                                                            "partition": "{}"}, timeout=30).status_code == 401
        # The plugin is loaded, with its entry in the UI's navigation
        plugins = {p["name"]: p for p in s.api("GET", "/plugins")["plugins"]}
        assert [v["href"] for v in plugins["copycat_offsets"]["external_views"]] == ["/copycat/offsets"]

        committed = airflow.offsets()[CONNECTOR]
        (orders,) = [e for e in committed.values() if "orders" in json.dumps(e["partition"])
                     and "customers" not in json.dumps(e["partition"])]
        partition, original = orders["partition"], orders["offset"]
        new = _lowered(original)
        store = KafkaOffsetStore(WorkerConfig({"bootstrap.servers": airflow.bootstrap,
                                               "offset.storage.topic": airflow.offset_topic}))
        s.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": True})  # a run triggered now stays queued
        with sync_playwright() as playwright, _page(playwright, tmp_path, "offsets-page-failure.png", OFFSETS_VIEWPORT) as page:
            try:
                _log_in(page, s.url, s.password)

                # The page shows the committed offset and the scheduled run that moved it
                page.goto(f"{s.url}/copycat/offsets")
                row = page.locator(f"section[data-connector='{CONNECTOR}'] tr[data-partition='{compact_json(partition)}']")
                expect(row.locator("code.offset")).to_have_text(compact_json(original))
                expect(row).to_contain_text(f"{DAG_ID} / scheduled__")
                expect(page.get_by_role("heading", name="Copycat offsets")).to_be_in_viewport()
                expect(row).to_be_in_viewport()
                _screenshot(page, "offsets-page.png", tmp_path)

                # A reset while a run is queued is refused, and nothing is written
                queued = s.api("POST", f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None})
                assert queued["state"] == "queued", queued
                row.locator("textarea[name=offset]").fill(json.dumps(new))
                with page.expect_response(lambda r: r.request.method == "POST") as answer:
                    row.get_by_role("button", name="Reset").click()
                assert answer.value.status == 409
                expect(page.locator("#result")).to_contain_text(
                    f"refusing to change offsets of connector '{CONNECTOR}': a run of it is in progress "
                    f"(DAG {DAG_ID}: 1 queued). Nothing was written.")
                assert airflow.offsets()[CONNECTOR][_key(partition)]["offset"] == original

                # Once that run is over, the same reset goes through and the offset topic returns it
                s.api("PATCH", f"/dags/{DAG_ID}/dagRuns/{queued['dag_run_id']}", json={"state": "failed"})
                page.goto(f"{s.url}/copycat/offsets")
                row.locator("textarea[name=offset]").fill(json.dumps(new))
                with page.expect_response(lambda r: r.request.method == "POST") as answer:
                    row.get_by_role("button", name="Reset").click()
                assert answer.value.status == 200
                expect(page.locator("#result")).to_contain_text(
                    f"before {compact_json(original)}, after {compact_json(new)} (read back from")
                expect(row.locator("code.offset")).to_have_text(compact_json(new))
                assert airflow.offsets()[CONNECTOR][_key(partition)]["offset"] == new
            finally:
                store.write(CONNECTOR, [(partition, original)])  # as the live run left it
                store.close()
                s.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        assert airflow.offsets()[CONNECTOR][_key(partition)]["offset"] == original


def _key(partition) -> str:
    from airflow_copycat.connect.assignment import canonical

    return canonical(partition)
