-- 0009_link_day: link_hour summed per UTC day, with the day's unique-visitor
-- sketch, maintained by ingest in the same statement as link_hour. A report
-- whose days are UTC days (zone UTC, or any zone at offset 0 over the range)
-- reads one row per day instead of 24 and unions 90 sketches for 90 days
-- instead of 2,160.

CREATE TABLE link_day (
    url_link_id bigint NOT NULL,
    day         date NOT NULL,
    visits      bigint NOT NULL DEFAULT 0,
    bot_visits  bigint NOT NULL DEFAULT 0,
    first_visit timestamptz,
    last_visit  timestamptz,
    PRIMARY KEY (url_link_id, day)
);
COMMENT ON TABLE link_day IS 'Visits per link per UTC day: link_hour summed per UTC calendar day (rollup maintained by ingest in the same statement as link_hour, exactly once, so both always agree). Reports read it when their days are UTC days.';
COMMENT ON COLUMN link_day.url_link_id IS 'url_link.id (orphan visits are in orphan_day instead).';
COMMENT ON COLUMN link_day.day IS 'UTC calendar day of visit_time ((hour AT TIME ZONE ''UTC'')::date of its link_hour rows).';
COMMENT ON COLUMN link_day.visits IS 'Human visits (is_bot false) in the day: sum of link_hour.visits of its hours.';
COMMENT ON COLUMN link_day.bot_visits IS 'Bot visits (is_bot true) in the day: sum of link_hour.bot_visits of its hours.';
COMMENT ON COLUMN link_day.first_visit IS 'Earliest visit_time in the day (humans and bots).';
COMMENT ON COLUMN link_day.last_visit IS 'Latest visit_time in the day (humans and bots).';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'link_hour'::regclass
               AND attname = 'visitors' AND NOT attisdropped) THEN
        ALTER TABLE link_day ADD COLUMN visitors hll NOT NULL DEFAULT hll_empty();
        COMMENT ON COLUMN link_day.visitors IS 'HyperLogLog sketch of the day''s human visitors: the union of link_hour.visitors of its hours (same hashing and precision, so it unions with them). Unique visitors over days: hll_cardinality(hll_union_agg(visitors)). Present only when link_hour.visitors is.';
        INSERT INTO link_day (url_link_id, day, visits, bot_visits, first_visit, last_visit, visitors)
        SELECT url_link_id, (hour AT TIME ZONE 'UTC')::date, sum(visits), sum(bot_visits),
               min(first_visit), max(last_visit), hll_union_agg(visitors)
        FROM link_hour GROUP BY 1, 2;
    ELSE
        INSERT INTO link_day (url_link_id, day, visits, bot_visits, first_visit, last_visit)
        SELECT url_link_id, (hour AT TIME ZONE 'UTC')::date, sum(visits), sum(bot_visits),
               min(first_visit), max(last_visit)
        FROM link_hour GROUP BY 1, 2;
    END IF;
END $$;
