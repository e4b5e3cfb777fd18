# Sourced by .ci/run: a throwaway PostgreSQL for the tests' PostgreSQL half.
# Finds the Debian `postgresql` package (apt-installs it where missing, and
# `pgbouncer` for the tests that go through a transaction-mode pooler), runs
# initdb into a fresh temp dir as the `postgres` user (initdb refuses root),
# starts it on 127.0.0.1 and a free port with fsync=off (throwaway data),
# exports FLOWDESK_TEST_PG_DSN, and stops + removes it when the shell exits.
pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
PGBIN=$(pg_bindir || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  echo "postgres.sh: installing the Debian postgresql package" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  PGBIN=$(pg_bindir)
fi
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "postgres.sh: installing the Debian pgbouncer package" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
fi
FLOWDESK_PGDATA=$(mktemp -d /tmp/flowdesk-ci-pg.XXXXXX)
if [ "$(id -u)" = 0 ]; then
  chown postgres "$FLOWDESK_PGDATA"
  AS_PG=(runuser -u postgres --)
else
  AS_PG=()
fi
FLOWDESK_PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
flowdesk_pg_stop() {
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$FLOWDESK_PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$FLOWDESK_PGDATA"
}
trap flowdesk_pg_stop EXIT
"${AS_PG[@]}" "$PGBIN/initdb" -D "$FLOWDESK_PGDATA" -A trust -U postgres -E UTF8 --no-sync >/dev/null
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$FLOWDESK_PGDATA" -l "$FLOWDESK_PGDATA/log" -w -o \
  "-p $FLOWDESK_PGPORT -k $FLOWDESK_PGDATA -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
  start >/dev/null
export FLOWDESK_TEST_PG_DSN="postgresql://postgres@127.0.0.1:$FLOWDESK_PGPORT/postgres"
"$PGBIN/psql" "$FLOWDESK_TEST_PG_DSN" -Atc "select 'postgres.sh: ready, ' || version()"
