#!/bin/sh
# migrate.sh - applies schemas/migrations/NNNN_*.sql in order, each in one
# transaction with its row in schema_migrations. Safe to run again: applied
# versions are skipped. Usage: schemas/migrate.sh "postgresql://user@host/db"
set -eu
dsn=${1:-${LINKPULSE_PG_DSN:-}}
if [ -z "$dsn" ]; then
	echo "usage: $0 PG_DSN (or set LINKPULSE_PG_DSN)" >&2
	exit 2
fi
dir=$(cd "$(dirname "$0")/migrations" && pwd)
PSQL="psql -X -q -v ON_ERROR_STOP=1 --no-psqlrc"

# under the same lock as the files: two runs creating it at once would
# collide on its row type even with IF NOT EXISTS
$PSQL -1 -d "$dsn" <<'SQL'
\o /dev/null
SELECT pg_advisory_xact_lock(7301);
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE schema_migrations IS 'Applied schema migrations (file names under schemas/migrations), by schemas/migrate.sh.';
COMMENT ON COLUMN schema_migrations.version IS 'Migration file name without .sql, e.g. 0001_links.';
COMMENT ON COLUMN schema_migrations.applied_at IS 'When it was applied.';
SQL

applied=$($PSQL -d "$dsn" -At -c "SELECT version FROM schema_migrations")
for f in "$dir"/[0-9][0-9][0-9][0-9]_*.sql; do
	v=$(basename "$f" .sql)
	if printf '%s\n' "$applied" | grep -qx "$v"; then
		continue
	fi
	# Checked again under the lock: two runs at once (two deploy jobs) both
	# saw it missing above, and the second would fail on what the first made.
	{
		printf '%s\n' '\o /dev/null'
		printf '%s\n' "SELECT pg_advisory_xact_lock(7301);"
		printf '%s\n' "SELECT NOT EXISTS (SELECT 1 FROM schema_migrations WHERE version = '$v') AS lp_todo \\gset"
		printf '%s\n' '\if :lp_todo'
		cat "$f"
		echo ";"
		echo "INSERT INTO schema_migrations (version) VALUES ('$v');"
		printf '%s\n' "\\echo migrate: applied $v"
		printf '%s\n' '\endif'
	} | $PSQL -1 -d "$dsn" -f -
done
