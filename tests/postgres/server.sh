#!/bin/sh
# A PostgreSQL server of the tests' own: a fresh cluster in DIR, listening
# on 127.0.0.1:PORT only (and a socket in DIR), stopped at the end.
#   server.sh start DIR PORT    (stops a server left in DIR first)
#   server.sh stop DIR
#   server.sh halt DIR          (stops it, keeping its data: a server down)
#   server.sh resume DIR        (starts a halted one again, same port and data)
# As root, the server runs as the `postgres` user (initdb refuses root).
set -eu
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "server.sh: no PostgreSQL server found under /usr/lib/postgresql (apt-get install postgresql-15)" >&2
  exit 1
fi
as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
stop() {
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_server "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
}
case "$cmd" in
start)
  port=$3
  stop
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  as_server "$bin/initdb" -D "$dir/data" -A trust -U troupe -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=64MB" start || {
    cat "$dir/server.log" >&2
    exit 1
  }
  echo "$port" >"$dir/port"
  echo "PostgreSQL on 127.0.0.1:$port (data in $dir/data)"
  ;;
stop)
  stop
  ;;
halt)
  as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  ;;
resume)
  port=$(cat "$dir/port")
  as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=64MB" start >/dev/null || {
    cat "$dir/server.log" >&2
    exit 1
  }
  ;;
*)
  echo "usage: server.sh start DIR PORT | stop DIR | halt DIR | resume DIR" >&2
  exit 2
  ;;
esac
