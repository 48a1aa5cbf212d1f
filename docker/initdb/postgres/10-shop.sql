-- The source database of the compose stack (service source-postgres, database "shop"), run once by
-- the postgres image on an empty data volume. Tables as scripts/shop_db.py makes them, with a few
-- rows, for the example DAGs copycat_jdbc_import (connection shop_db) and copycat_postgres_cdc
-- (connection shop_pg; the server runs with wal_level=logical, the user may replicate).
-- A second database, "warehouse", is the sink of copycat_kafka_to_postgres (connection warehouse_db).

CREATE TABLE customers (
    id         SERIAL PRIMARY KEY,
    name       VARCHAR(100) NOT NULL,
    email      VARCHAR(200),
    updated_at TIMESTAMP NOT NULL
);

CREATE TABLE orders (
    id          SERIAL PRIMARY KEY,
    customer_id INTEGER NOT NULL,
    amount      NUMERIC(10, 2) NOT NULL,
    status      VARCHAR(20) NOT NULL,
    updated_at  TIMESTAMP NOT NULL
);

INSERT INTO customers (name, email, updated_at)
SELECT 'customer ' || n, 'c' || n || '@shop.example', now() AT TIME ZONE 'UTC' - (n || ' minutes')::interval
FROM generate_series(1, 20) AS n;

INSERT INTO orders (customer_id, amount, status, updated_at)
SELECT 1 + n % 20, round((n * 7.35)::numeric % 500, 2), 'new', now() AT TIME ZONE 'UTC' - (n || ' minutes')::interval
FROM generate_series(1, 100) AS n;

CREATE DATABASE warehouse;
