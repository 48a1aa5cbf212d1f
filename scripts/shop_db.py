"""The demo shop database of ``dags/jdbc_import.py``: tables ``customers`` and ``orders``.

Creates the tables when missing and adds rows whose ``updated_at`` lies in the hours you ask
for (and updates a few earlier orders, as a live shop does), so an hourly import and its
backfills have something to copy. Works on any SQLAlchemy URL; a plain path means SQLite::

    python scripts/shop_db.py /tmp/copycat-demo/shop.db                  # 20 orders in the last hour
    python scripts/shop_db.py /tmp/copycat-demo/shop.db --hours 24 --per-hour 50
    python scripts/shop_db.py postgresql+psycopg://localhost/test --start 2026-11-20T00:00 --hours 6

Then point the DAG's Airflow connection at it, e.g.
``AIRFLOW_CONN_SHOP_DB='{"conn_type": "sqlite", "host": "/tmp/copycat-demo/shop.db"}'``.
Timestamps are naive UTC (the JDBC source's default ``db.timezone``). Importable too:
the tests call :func:`create_tables`, :func:`add_orders` and :func:`add_customers`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
from typing import Sequence

import sqlalchemy as sa


def tables(prefix: str = "") -> tuple[sa.Table, sa.Table]:
    """``(customers, orders)`` (named ``<prefix>customers`` / ``<prefix>orders``)."""
    md = sa.MetaData()
    customers = sa.Table(
        f"{prefix}customers", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("email", sa.String(200)),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )
    orders = sa.Table(
        f"{prefix}orders", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("customer_id", sa.Integer, nullable=False),
        sa.Column("amount", sa.Numeric(10, 2), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )
    return customers, orders


def engine_for(target: str) -> sa.Engine:
    """An engine for a SQLAlchemy URL, or for a SQLite file given as a path."""
    return sa.create_engine(target if "://" in target else f"sqlite:///{target}")


def create_tables(engine: sa.Engine, prefix: str = "") -> tuple[sa.Table, sa.Table]:
    """Create ``customers`` and ``orders`` when missing; returns them."""
    customers, orders = tables(prefix)
    customers.metadata.create_all(engine)
    return customers, orders


def _naive_utc(t: dt.datetime) -> dt.datetime:
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def add_customers(engine: sa.Engine, customers: sa.Table, stamps: Sequence[dt.datetime]) -> list[int]:
    """One customer per timestamp (its ``updated_at``); returns their ids."""
    ids = []
    with engine.begin() as conn:
        for t in stamps:
            n = conn.execute(sa.select(sa.func.count()).select_from(customers)).scalar_one() + 1
            ids.append(conn.execute(customers.insert().values(
                name=f"customer {n}", email=f"c{n}@shop.example", updated_at=_naive_utc(t))).inserted_primary_key[0])
    return ids


def add_orders(engine: sa.Engine, orders: sa.Table, stamps: Sequence[dt.datetime], *,
               seed: int = 0) -> list[int]:
    """One order per timestamp (its ``updated_at``), amounts from ``seed``; returns their ids."""
    rng = random.Random(seed)
    with engine.begin() as conn:
        return [conn.execute(orders.insert().values(
            customer_id=rng.randint(1, 20), amount=round(rng.uniform(5, 500), 2), status="new",
            updated_at=_naive_utc(t))).inserted_primary_key[0] for t in stamps]


def ship_orders(engine: sa.Engine, orders: sa.Table, ids: Sequence[int], at: dt.datetime) -> None:
    """Mark orders shipped at ``at`` (moves their ``updated_at``: an incremental import sees them again)."""
    with engine.begin() as conn:
        conn.execute(orders.update().where(orders.c.id.in_(list(ids))).values(status="shipped",
                                                                             updated_at=_naive_utc(at)))


def fill(engine: sa.Engine, start: dt.datetime, hours: int, per_hour: int, prefix: str = "") -> int:
    """``per_hour`` orders (and a new customer) in each of ``hours`` hours from ``start``; in each hour
    a few orders of the hour before are shipped. Returns the number of orders added."""
    customers, orders = create_tables(engine, prefix)
    rng = random.Random(start.timestamp())
    added, previous = 0, []
    for h in range(hours):
        hour = start + dt.timedelta(hours=h)
        stamps = sorted(hour + dt.timedelta(seconds=rng.uniform(0, 3599)) for _ in range(per_hour))
        add_customers(engine, customers, [hour + dt.timedelta(seconds=1)])
        if previous:
            ship_orders(engine, orders, previous[: max(1, len(previous) // 4)], hour + dt.timedelta(seconds=2))
        previous = add_orders(engine, orders, stamps, seed=int(hour.timestamp()))
        added += len(previous)
    return added


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="SQLAlchemy URL, or the path of a SQLite file")
    parser.add_argument("--start", help="first hour, ISO-8601 UTC (default: the hour before the current one)")
    parser.add_argument("--hours", type=int, default=1)
    parser.add_argument("--per-hour", type=int, default=20)
    parser.add_argument("--prefix", default="", help="table name prefix")
    args = parser.parse_args(argv)
    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = dt.datetime.fromisoformat(args.start) if args.start else now - dt.timedelta(hours=args.hours)
    engine = engine_for(args.target)
    try:
        n = fill(engine, start if start.tzinfo else start.replace(tzinfo=dt.timezone.utc), args.hours,
                 args.per_hour, args.prefix)
    finally:
        engine.dispose()
    print(f"{args.target}: {n} order(s) added in {args.hours} hour(s) from {start.isoformat()}")


if __name__ == "__main__":
    main()
