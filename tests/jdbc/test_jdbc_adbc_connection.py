"""The PostgreSQL batch path's ADBC connection: its results end on the server when the run stops them.

A JDBC import run in process (the ``copycat`` command, a test, Airflow's ``dag.test()``) polls on the main
thread: Ctrl-C there must cancel a long query on the server, not wait for it; and closing the connection
with a stream read half-way (a run that stopped mid-snapshot) must end the server's backend.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
import sqlalchemy as sa

from airflow_copycat.connectors.jdbc.arrow_reader import AdbcConnection, adbc_error_types


@pytest.fixture
def engine(postgres_url):
    e = sa.create_engine(postgres_url)
    yield e
    e.dispose()


def _backend_alive(engine, pid: int) -> bool:
    with engine.connect() as c:
        return bool(c.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar())


def test_ctrl_c_during_a_query_cancels_it_on_the_server(engine):
    # Given a query that would run for a minute (and Python's own Ctrl-C handler, which a test worker
    # process may have replaced)
    conn = AdbcConnection(engine)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        def interrupt_once_running() -> None:  # Ctrl-C once the server runs the query
            for _ in range(600):
                with engine.connect() as c:
                    if c.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p AND state = 'active' "
                                         "AND query LIKE '%pg_sleep%'"), {"p": conn.backend_pid}).scalar():
                        break
                threading.Event().wait(0.1)
            os.kill(os.getpid(), signal.SIGINT)

        interrupt = threading.Thread(target=interrupt_once_running, daemon=True)
        interrupt.start()

        # When Ctrl-C arrives while the main thread waits for it
        with pytest.raises((KeyboardInterrupt, *adbc_error_types())) as caught:
            conn.fetch(sa.select(sa.func.pg_sleep(60)))
        interrupt.join()

        # Then the server cancelled the statement (it did not run to its end), and the connection still works
        assert "cancel" in str(caught.value).lower(), repr(caught.value)
        assert conn.alive()
    finally:
        signal.signal(signal.SIGINT, previous)
        conn.close()


def test_closing_with_a_stream_read_half_way_ends_the_backend(engine):
    # Given a stream of a large result read one batch far
    conn = AdbcConnection(engine)
    stream = conn.stream(sa.select(sa.text("x")).select_from(sa.text("generate_series(1, 3000000) x")))
    assert next(stream).num_rows > 0
    assert _backend_alive(engine, conn.backend_pid)

    # When the connection is closed without finishing the stream
    conn.close()

    # Then the server's backend is gone
    for _ in range(50):
        if not _backend_alive(engine, conn.backend_pid):
            break
        threading.Event().wait(0.1)
    assert not _backend_alive(engine, conn.backend_pid)
