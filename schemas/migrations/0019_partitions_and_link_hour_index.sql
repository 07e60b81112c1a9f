-- 0019: visit_record_ensure_partition made safe in three more ways, and an
-- index for the links of a period (reports --all).
-- * Two sessions making one month at once (two lanes or two consumers at a
--   month's first batch): the second waited on the advisory lock, then
--   checked again with to_regclass, whose "not found" the session had
--   cached, and failed on CREATE TABLE (42P07, its batch retried). It now
--   checks pg_inherits with a query, which sees the other's commit.
-- * The bounds were formatted with %L in the session's DateStyle: with
--   DateStyle SQL or Postgres a zone prints as an abbreviation that reads
--   back wrongly (Asia/Shanghai's CST as US Central: March began at 14:00
--   UTC, its first hours had no partition). They are written as UTC text.
-- * A month detached but not dropped (between the two retention steps)
--   passed the name check, and rows of that month then failed with "no
--   partition of relation found". It now says what is wrong.
-- link_hour_period_idx: reports --all lists the links with visits in a
-- range (SELECT DISTINCT url_link_id FROM link_hour WHERE hour in range);
-- the primary key starts with url_link_id, so that read the whole table
-- every run. Building it locks link_hour against writes (ingest waits) for
-- the build's time; on a large table run "CREATE INDEX CONCURRENTLY
-- link_hour_period_idx ON link_hour (hour, url_link_id)" by hand first
-- (a valid index of that name is kept; an invalid one, left by a failed
-- concurrent build, is built again).

CREATE OR REPLACE FUNCTION visit_record_ensure_partition(ts timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    mo   timestamp := date_trunc('month', ts AT TIME ZONE 'UTC');
    name text := 'visit_record_' || to_char(mo, 'YYYYMM');
    q    text := 'SELECT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid'
                 ' WHERE i.inhparent = ''visit_record''::regclass AND c.relname = $1)';
    there boolean;
BEGIN
    EXECUTE q INTO there USING name;
    IF there THEN
        RETURN name;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext(name));
    EXECUTE q INTO there USING name;  -- a new snapshot: sees a commit made meanwhile
    IF there THEN
        RETURN name;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class c WHERE c.relname = name AND c.relnamespace =
               (SELECT relnamespace FROM pg_class WHERE oid = 'visit_record'::regclass)) THEN
        RAISE EXCEPTION 'table % exists but is not a partition of visit_record (detached?): '
            'attach it again (ALTER TABLE visit_record ATTACH PARTITION ...) or drop it', name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF visit_record FOR VALUES FROM (%L) TO (%L)', name,
                   to_char(mo, 'YYYY-MM-DD HH24:MI:SS') || '+00',
                   to_char(mo + interval '1 month', 'YYYY-MM-DD HH24:MI:SS') || '+00');
    EXECUTE format('COMMENT ON TABLE %I IS %L', name,
                   'visit_record rows of ' || to_char(mo, 'YYYY-MM') || ' (UTC)');
    RETURN name;
END $$;
COMMENT ON FUNCTION visit_record_ensure_partition(timestamptz) IS 'Creates visit_record_YYYYMM for the UTC month of ts if no such partition is attached, bounded by that month in UTC whatever the session''s TimeZone and DateStyle; safe to call from several sessions at once; fails naming the table when one of that name exists detached. Returns its name.';

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                   WHERE c.relname = 'link_hour_period_idx' AND x.indisvalid
                   AND x.indrelid = 'link_hour'::regclass) THEN
        DROP INDEX IF EXISTS link_hour_period_idx;
        CREATE INDEX link_hour_period_idx ON link_hour (hour, url_link_id);
    END IF;
END $$;
COMMENT ON INDEX link_hour_period_idx IS 'Links with visits in a period: WHERE hour >= ... AND hour < ... (reports --all). Neither column is ever updated, so link_hour''s upserts stay HOT.';

COMMENT ON COLUMN link_hour.hour IS 'Start of the UTC hour: date_trunc(''hour'', visit_time, ''UTC'') (a timestamptz; compare it with timestamptz values, not with visit_time AT TIME ZONE ''UTC'', a timestamp without zone).';
