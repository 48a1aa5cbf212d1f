"""Shared helpers of the benchmarks (not a benchmark itself: ``make bench`` runs ``bench_*.py``).

Every benchmark prints its figures on stdout as lines of exactly the form::

    bench <name>: <value> <unit> ratio=<r> vs <baseline>

where a baseline measured in the same run prints ``ratio=1.00 vs itself`` and
every other figure's ratio is ``figure / baseline figure`` (for msg/s, below 1
means slower than the baseline; for seconds, above 1 means slower). Anything
else (set-up times, verification, profiles) goes to stderr.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator

# the repository's root, for the test servers the benchmarks share with the tests (tests/support)
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic

# ------------------------------------------------------------------ output


def note(msg: str) -> None:
    """Progress and details: stderr, so stdout holds only ``bench`` lines."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def report(name: str, value: float, unit: str, ratio: float, baseline: str) -> None:
    text = f"{value:.0f}" if value >= 100 else f"{value:.2f}"
    print(f"bench {name}: {text} {unit} ratio={ratio:.2f} vs {baseline}", flush=True)


def fail(msg: str) -> None:
    """A verification failed: say so and exit non-zero."""
    print(f"BENCH VERIFICATION FAILED: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def uid() -> str:
    return uuid.uuid4().hex[:8]


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """``with timed() as t: ...`` then ``t[0]`` is the wall time in seconds."""
    out: list[float] = []
    start = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - start)


def profiled(fn: Callable[[], object], title: str, top: int = 30) -> object:
    """Run ``fn`` under cProfile and print the top functions (by own time, then cumulative) to stderr."""
    prof = cProfile.Profile()
    result = prof.runcall(fn)
    for order in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(order).print_stats(top)
        note(f"cProfile of {title}, sorted by {order}:\n{buf.getvalue()}")
    return result


# ------------------------------------------------------------------ data

_HOSTS = [f"web-{i:02d}" for i in range(12)]
_METHODS = ["GET"] * 8 + ["POST", "PUT", "DELETE"]
_PATHS = ["/api/v1/orders", "/api/v1/items", "/api/v2/customers", "/static/app.js", "/health", "/api/v1/search"]
_AGENTS = ["curl/8.5.0", "Mozilla/5.0 (X11; Linux)", "python-requests/2.32", "Go-http-client/2.0"]
_STATUS = [200] * 14 + [201, 204, 301, 404, 500]


def log_fields(i: int, rng: random.Random) -> dict:
    """The fields of log line ``i`` (deterministic for a given ``rng`` state)."""
    r = rng.random
    return {
        "ts": 1795305600000 + i * 37 + int(r() * 37),  # 2026-11-22T00:00:00Z onwards
        "host": _HOSTS[int(r() * len(_HOSTS))],
        "pid": 1000 + int(r() * 9000),
        "client": f"10.{int(r() * 256)}.{int(r() * 256)}.{int(r() * 256)}",
        "method": _METHODS[int(r() * len(_METHODS))],
        "path": f"{_PATHS[int(r() * len(_PATHS))]}/{int(r() * 10**6)}",
        "status": _STATUS[int(r() * len(_STATUS))],
        "bytes": 20 + int(r() * 50000),
        "duration_ms": round(r() * 250, 3),
        "agent": _AGENTS[int(r() * len(_AGENTS))],
        "request_id": f"{rng.getrandbits(32):08x}",
    }


_SECOND_TEXT: dict[int, str] = {}


def _second_text(secs: int) -> str:
    text = _SECOND_TEXT.get(secs)
    if text is None:
        if len(_SECOND_TEXT) > 4096:
            _SECOND_TEXT.clear()
        t = time.gmtime(secs)
        text = _SECOND_TEXT[secs] = (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
                                     f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}")
    return text


def format_line(f: dict) -> str:
    """An nginx-like access-log line of 100-160 bytes (with quotes, so JSON has escaping to do)."""
    secs, ms = divmod(f["ts"], 1000)
    return (f"{_second_text(secs)}.{ms:03d}Z {f['host']} nginx[{f['pid']}]: {f['client']} "
            f"\"{f['method']} {f['path']}\" {f['status']} {f['bytes']} {f['duration_ms']} "
            f"\"{f['agent']}\" rid={f['request_id']}")


def log_lines(n: int, seed: int = 20261122) -> Iterator[tuple[dict, str]]:
    rng = random.Random(seed)
    for i in range(n):
        f = log_fields(i, rng)
        yield f, format_line(f)


def write_log_file(path: str, n: int) -> tuple[int, int]:
    """Write ``n`` lines; return ``(bytes of the file, bytes of the lines without their newlines)``."""
    total = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        chunk = []
        for _, line in log_lines(n):
            chunk.append(line)
            total += len(line)
            if len(chunk) == 10000:
                out.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            out.write("\n".join(chunk) + "\n")
    return os.path.getsize(path), total


# ------------------------------------------------------------------ Kafka


@contextlib.contextmanager
def kafka() -> Iterator[str]:
    """Bootstrap servers: ``KAFKA_BOOTSTRAP`` if set, else an embedded broker for the duration."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        note(f"using Kafka at {external} (KAFKA_BOOTSTRAP)")
        yield external
        return
    from airflow_copycat.testing.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        note(f"embedded broker (Tansu, memory storage) at {broker.bootstrap}")
        yield broker.bootstrap


def _cpu_of(names: set[str]) -> float:
    """CPU seconds used so far by the processes of this machine named one of ``names`` (their ``comm``),
    their reaped children included: PostgreSQL's postmaster collects its ended backends' time."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] in names:
            fields = stat[stat.rindex(")") + 2:].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


@contextlib.contextmanager
def cpu_used(embedded_broker: bool = True) -> Iterator[dict[str, float]]:
    """CPU seconds spent while the block runs, filled in when it ends: ``process`` (this process, every
    thread: Python, the database driver's, librdkafka's), ``broker`` (the embedded broker; absent with
    ``KAFKA_BOOTSTRAP``) and ``postgres`` (the local PostgreSQL server's processes). On a machine whose
    cores all of these share, the sum per row bounds what any contender can reach."""
    broker = embedded_broker and not os.environ.get("KAFKA_BOOTSTRAP")
    out: dict[str, float] = {}
    t0, b0, p0 = os.times(), _cpu_of({"tansu"}) if broker else 0.0, _cpu_of({"postgres"})
    try:
        yield out
    finally:
        t1 = os.times()
        out["process"] = (t1.user + t1.system) - (t0.user + t0.system)
        if broker:
            out["broker"] = _cpu_of({"tansu"}) - b0
        out["postgres"] = _cpu_of({"postgres"}) - p0


def cpu_note(what: str, used: dict[str, float], rows: int) -> float:
    """Print ``used`` (:func:`cpu_used`) per row; returns the total in microseconds per row."""
    parts = {k: v / rows * 1e6 for k, v in used.items()}
    note(f"{what}: CPU per row " + ", ".join(f"{k} {v:.2f} us" for k, v in parts.items())
         + f", total {sum(parts.values()):.2f} us")
    return sum(parts.values())


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=-1)])[name].result(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        t = admin.list_topics(timeout=10).topics.get(name)
        if t is not None and not t.error and len(t.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} did not appear")


def delete_topic(bootstrap: str, name: str) -> None:
    """Free the embedded broker's memory; errors are ignored."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the result is in
    try:
        admin.delete_topics([name], operation_timeout=30)[name].result(30)
    except Exception as e:  # noqa: BLE001 -- best effort
        note(f"could not delete topic {name}: {e}")


def read_topic(bootstrap: str, topic: str, partitions: int, fn: Callable[[bytes], object] | None = None) -> int:
    """Count the records of ``topic`` from the beginning to the end of every partition
    (runtime.kafka.read_to_end: EOF events, never watermarks); ``fn`` sees every value."""
    from airflow_copycat.runtime.kafka import read_to_end

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{uid()}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    n = 0
    try:
        for msg in read_to_end(c, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)],
                               timeout_s=300):
            n += 1
            if fn is not None:
                fn(msg.value())
    finally:
        c.close()
    return n


def produce_all(producer_config: dict, topic: str, values) -> int:
    """Produce ``values`` (bytes, or ``(key, value)`` pairs) as the best plain confluent-kafka program does:
    delivery reports for failures only (``delivery.report.only.error``, one error callback), ``poll(0)``
    every 1,000 records and whenever the queue is full, ``flush`` at the end. Returns the count."""
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))

    p = Producer({**producer_config, "delivery.report.only.error": True, "on_delivery": on_delivery})
    n = 0
    for v in values:
        k = None
        if isinstance(v, tuple):
            k, v = v
        while True:
            try:
                p.produce(topic, v, k)
                break
            except BufferError:
                p.poll(0.5)
        n += 1
        if n % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or errors:
        fail(f"producing to {topic}: {left} not acknowledged, errors {errors[:3]}")
    return n

