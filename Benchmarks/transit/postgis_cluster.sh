#!/usr/bin/env bash
# A throwaway PostgreSQL 15 + PostGIS 3 cluster for Benchmarks/transit/postgis.py.
#
#   postgis_cluster.sh install      apt-get install postgresql-15-postgis-3 (and psycopg from PyPI) if missing
#   postgis_cluster.sh start DIR    initdb in DIR/data, start it on a free port, Unix socket in DIR only
#                                   (no TCP listener); prints the DSN (also written to DIR/dsn)
#   postgis_cluster.sh stop DIR     stops it (DIR is left for the caller to remove)
#
# PostgreSQL refuses to run as root: as root, initdb and pg_ctl run as the `postgres` user (made by
# Debian's package) and DIR is given to it. Trust authentication, fsync off (a benchmark's scratch
# data: only the load gets faster, queries read from memory either way), other settings default.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
as_postgres() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
install)
    if [[ ! -f /usr/share/postgresql/15/extension/postgis.control ]]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15-postgis-3 >/dev/null
    fi
    python3 -c 'import psycopg' 2>/dev/null || python3 -m pip install -q 'psycopg[binary]'
    ;;
start)
    dir=${2:?usage: postgis_cluster.sh start DIR}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ $(id -u) == 0 ]] && chown postgres "$dir"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-p $port -k $dir -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    echo "host=$dir port=$port user=postgres dbname=postgres" | tee "$dir/dsn"
    ;;
stop)
    dir=${2:?usage: postgis_cluster.sh stop DIR}
    as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
*)
    echo "usage: postgis_cluster.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
