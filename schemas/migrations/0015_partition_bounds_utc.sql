-- 0015: visit_record's month partitions bounded by UTC months whatever the
-- session's TimeZone. Before, visit_record_ensure_partition added the month
-- to a timestamptz ("m + interval '1 month'"), which PostgreSQL does in the
-- session's zone: ingest's sessions are UTC and made the right bounds, but
-- a migration or an analyst's psql on a server whose default zone is not
-- UTC made, for example, March end on Mar 28 23:00 UTC (America/New_York:
-- visits in the gap had no partition and failed their batch on every
-- retry) or October overlap November (Europe/Berlin: 0002 itself failed).
-- This migration replaces the function, then checks every partition: one
-- with other bounds is dropped and made again when it is empty, and named
-- in a WARNING when it holds rows (move them by hand: detach it, create
-- the month with visit_record_ensure_partition, INSERT ... SELECT, drop).

CREATE OR REPLACE FUNCTION visit_record_ensure_partition(ts timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    m    timestamptz := date_trunc('month', ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    name text := 'visit_record_' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass(name) IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext(name));
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF visit_record FOR VALUES FROM (%L) TO (%L)',
                           name, m, (date_trunc('month', ts AT TIME ZONE 'UTC') + interval '1 month')
                                    AT TIME ZONE 'UTC');
            EXECUTE format('COMMENT ON TABLE %I IS %L', name,
                           'visit_record rows of ' || to_char(m AT TIME ZONE 'UTC', 'YYYY-MM') || ' (UTC)');
        END IF;
    END IF;
    RETURN name;
END $$;
COMMENT ON FUNCTION visit_record_ensure_partition(timestamptz) IS 'Creates visit_record_YYYYMM for the UTC month of ts if missing, bounded by that month in UTC whatever the session''s TimeZone; returns its name.';

-- Bounds as PostgreSQL prints them, in UTC and ISO for the comparison.
SET LOCAL TimeZone = 'UTC';
SET LOCAL DateStyle = 'ISO, YMD';
DO $$
DECLARE
    r       record;
    lo      timestamptz;
    redo    timestamptz[] := '{}';
    nonempty boolean;
BEGIN
    FOR r IN SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'visit_record'::regclass
                AND c.relname ~ '^visit_record_[0-9]{6}$'
    LOOP
        lo := (substr(r.relname, 14, 4) || '-' || substr(r.relname, 18, 2) || '-01 00:00:00+00')::timestamptz;
        CONTINUE WHEN r.bound = format('FOR VALUES FROM (%L) TO (%L)', lo::text,
                                       ((lo AT TIME ZONE 'UTC') + interval '1 month')
                                       AT TIME ZONE 'UTC');
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', r.relname) INTO nonempty;
        IF nonempty THEN
            RAISE WARNING '%: bounds % are not its UTC month and it holds rows: move them by hand (see 0015)',
                r.relname, r.bound;
        ELSE
            EXECUTE format('DROP TABLE %I', r.relname);
            redo := redo || lo;
        END IF;
    END LOOP;
    -- made again once every misplaced empty one is gone (no overlaps)
    PERFORM visit_record_ensure_partition(t) FROM unnest(redo) AS t;
END $$;
