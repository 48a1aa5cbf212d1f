#!/usr/bin/env bash
# Make sure the test databases answer: PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres,
# database `test`) and MariaDB on 127.0.0.1:3306 (root, empty password, database `test`).
# Idempotent and quick when both already run; starts a stopped server; installs a missing one
# from Debian's packages when root with apt-get. Exits non-zero with the reason when a server
# cannot be had: `make test` fails loudly instead of skipping the database tests.
# COPYCAT_TEST_POSTGRES_URL / COPYCAT_TEST_MARIADB_URL set: the tests use that server, left alone here.
set -euo pipefail

PG_HOST=127.0.0.1 PG_PORT=5432 PG_USER=postgres
MY_HOST=127.0.0.1 MY_PORT=3306
WAIT_S=${COPYCAT_DB_WAIT_S:-60}
HBA_MARK="# airflow-copycat scripts/ensure_databases.sh: trust on loopback for the test suite"

say() { echo "ensure_databases: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

APT_UPDATED=
apt_install() {  # apt_install PKG...
    is_root && command -v apt-get >/dev/null \
        || die "$* not installed, and this user cannot install it (needs root and apt-get). Install it, or set COPYCAT_TEST_POSTGRES_URL / COPYCAT_TEST_MARIADB_URL to a running server."
    if [ -z "$APT_UPDATED" ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
        APT_UPDATED=1
    fi
    say "installing $* from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2 \
        || die "apt-get install $* failed"
}

wait_for() {  # wait_for NAME CMD...: bounded wait until CMD succeeds
    local name=$1; shift
    local deadline=$((SECONDS + WAIT_S))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "$name did not answer within ${WAIT_S}s"
        sleep 0.5
    done
}

# ---------------------------------------------------------------- PostgreSQL
pg_sql() {  # pg_sql DB SQL: over TCP, as the test suite connects
    psql -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d "$1" -w -Atqc "$2"
}

pg_cluster_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

ensure_postgres() {
    if [ -n "${COPYCAT_TEST_POSTGRES_URL:-}" ]; then
        say "COPYCAT_TEST_POSTGRES_URL is set: local PostgreSQL left alone"; return
    fi
    # Fast path: up, trust auth over TCP, database `test` present.
    if command -v psql >/dev/null && pg_sql test 'select 1' >/dev/null 2>&1; then
        return
    fi
    if ! command -v pg_ctlcluster >/dev/null || [ -z "$(pg_cluster_version)" ]; then
        apt_install postgresql
        [ -n "$(pg_cluster_version)" ] || die "postgresql installed but no cluster under /etc/postgresql"
    fi
    local ver; ver=$(pg_cluster_version)
    if ! pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; then
        say "starting PostgreSQL $ver/main"
        pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 \
            || pg_isready -q -h "$PG_HOST" -p "$PG_PORT" \
            || die "could not start PostgreSQL $ver/main (see /var/log/postgresql/)"
    fi
    wait_for "PostgreSQL at $PG_HOST:$PG_PORT" pg_isready -h "$PG_HOST" -p "$PG_PORT"
    if ! pg_sql postgres 'select 1' >/dev/null 2>&1; then
        # A fresh Debian cluster asks for passwords over TCP: trust loopback, as on the project's machines.
        local hba="/etc/postgresql/$ver/main/pg_hba.conf"
        is_root && [ -w "$hba" ] && ! grep -qF "$HBA_MARK" "$hba" \
            || die "cannot connect to PostgreSQL as $PG_USER over TCP without a password; allow trust for 127.0.0.1 in pg_hba.conf or set COPYCAT_TEST_POSTGRES_URL"
        say "adding trust for 127.0.0.1 and ::1 to $hba"
        { echo "$HBA_MARK"; echo "host all all 127.0.0.1/32 trust"; echo "host all all ::1/128 trust";
          cat "$hba"; } > "$hba.tmp" && chown --reference="$hba" "$hba.tmp" && chmod --reference="$hba" "$hba.tmp" \
            && mv "$hba.tmp" "$hba"
        pg_ctlcluster --skip-systemctl-redirect "$ver" main reload >&2
        wait_for "PostgreSQL trust auth over TCP" pg_sql postgres 'select 1'
    fi
    if [ -z "$(pg_sql postgres "select 1 from pg_database where datname = 'test'")" ]; then
        say "creating PostgreSQL database test"
        pg_sql postgres 'create database test' >/dev/null
    fi
    pg_sql test 'select 1' >/dev/null || die "PostgreSQL database test does not answer"
    say "PostgreSQL ready at $PG_HOST:$PG_PORT"
}

# ---------------------------------------------------------------- MariaDB
my_sql() {  # my_sql SQL: over TCP as root with an empty password, ignoring option files
    mariadb --no-defaults --protocol=TCP -h "$MY_HOST" -P "$MY_PORT" -uroot --connect-timeout=3 -N -B -e "$1"
}
my_ping() { mariadb-admin --no-defaults --protocol=TCP -h "$MY_HOST" -P "$MY_PORT" -uroot --connect-timeout=2 ping; }

ensure_mariadb() {
    if [ -n "${COPYCAT_TEST_MARIADB_URL:-}" ]; then
        say "COPYCAT_TEST_MARIADB_URL is set: local MariaDB left alone"; return
    fi
    if command -v mariadb >/dev/null && my_sql 'use test; select 1' >/dev/null 2>&1; then
        return
    fi
    if [ ! -x /usr/sbin/mariadbd ] || ! command -v mariadb >/dev/null; then
        apt_install mariadb-server mariadb-client
    fi
    if ! my_ping >/dev/null 2>&1; then
        say "starting MariaDB"
        if is_root; then install -d -o mysql -g mysql /run/mysqld; fi
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql >&2 \
            || die "could not start /usr/sbin/mariadbd"
    fi
    wait_for "MariaDB at $MY_HOST:$MY_PORT" my_ping
    if ! my_sql 'select 1' >/dev/null 2>&1; then
        # A fresh Debian install lets root in only through the socket (unix_socket auth): add the
        # empty password over TCP, as on the project's machines.
        is_root || die "cannot connect to MariaDB as root with an empty password over TCP; set COPYCAT_TEST_MARIADB_URL"
        say "allowing root with an empty password over TCP"
        mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
            CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
            GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" >&2 \
            || die "could not configure MariaDB root through the local socket"
        my_sql 'select 1' >/dev/null || die "MariaDB still refuses root with an empty password over TCP"
    fi
    my_sql 'create database if not exists test' >/dev/null
    my_sql 'use test; select 1' >/dev/null || die "MariaDB database test does not answer"
    say "MariaDB ready at $MY_HOST:$MY_PORT"
}

ensure_postgres
ensure_mariadb
