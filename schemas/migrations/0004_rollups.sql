-- 0004_rollups: per-link rollups kept by ingest in the same transaction as
-- the visit rows and the offsets, so reports never scan raw visits for what
-- a rollup can answer. Unique visitors use the hll extension when the server
-- has it (Debian postgresql-15-hll); otherwise exact per-hour visitor sets.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'hll') THEN
        CREATE EXTENSION IF NOT EXISTS hll;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    -- hll is not a trusted extension: a database owner who is not a
    -- superuser cannot create it (a superuser can, before migrating)
    RAISE NOTICE 'hll is installed but this role may not create it: exact visitor sets';
END $$;

CREATE TABLE link_hour (
    url_link_id bigint NOT NULL,
    hour        timestamptz NOT NULL,
    visits      bigint NOT NULL DEFAULT 0,
    bot_visits  bigint NOT NULL DEFAULT 0,
    first_visit timestamptz,
    last_visit  timestamptz,
    PRIMARY KEY (url_link_id, hour)
);
COMMENT ON TABLE link_hour IS 'Visits per link per UTC hour (rollup maintained by ingest with each batch, exactly once). Hours sum to days in any whole-hour time zone; per-day and per-hour series in reports come from here.';
COMMENT ON COLUMN link_hour.url_link_id IS 'url_link.id (orphan visits are in orphan_day instead).';
COMMENT ON COLUMN link_hour.hour IS 'Start of the UTC hour (date_trunc(''hour'', visit_time AT TIME ZONE ''UTC'')).';
COMMENT ON COLUMN link_hour.visits IS 'Human visits (is_bot false) in the hour.';
COMMENT ON COLUMN link_hour.bot_visits IS 'Bot visits (is_bot true) in the hour.';
COMMENT ON COLUMN link_hour.first_visit IS 'Earliest visit_time in the hour (humans and bots).';
COMMENT ON COLUMN link_hour.last_visit IS 'Latest visit_time in the hour (humans and bots).';

-- Unique human visitors per link per hour: an hll sketch of client_id when the
-- extension exists (merge with hll_union_agg across hours, then
-- hll_cardinality), else the exact set in link_hour_visitor.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'hll') THEN
        ALTER TABLE link_hour ADD COLUMN visitors hll NOT NULL DEFAULT hll_empty();
        COMMENT ON COLUMN link_hour.visitors IS 'HyperLogLog sketch (hll extension, default precision) of hll_hash_text(client_id) over human visits in the hour. Unique visitors for any set of hours: hll_cardinality(hll_union_agg(visitors)). Exact for small counts (explicit mode), about 2% error beyond.';
    END IF;
END $$;

CREATE TABLE link_hour_visitor (
    url_link_id bigint NOT NULL,
    hour        timestamptz NOT NULL,
    client_id   char(40) NOT NULL,
    PRIMARY KEY (url_link_id, hour, client_id)
);
COMMENT ON TABLE link_hour_visitor IS 'Exact unique-visitor fallback, used only when the hll extension is absent (then link_hour has no visitors column): one row per human client_id per link per UTC hour. Unique visitors for a range: count(DISTINCT client_id). Empty when hll is installed.';
COMMENT ON COLUMN link_hour_visitor.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_hour_visitor.hour IS 'Start of the UTC hour.';
COMMENT ON COLUMN link_hour_visitor.client_id IS 'visit_record.client_id of a human visitor in that hour.';

CREATE TABLE link_day_dim (
    url_link_id bigint NOT NULL,
    day         date NOT NULL,
    dimension   text NOT NULL CHECK (dimension IN ('country', 'province', 'city', 'isp',
                    'browser', 'browser_version', 'os', 'device_type', 'referer_host',
                    'language')),
    value       text NOT NULL,
    is_bot      boolean NOT NULL,
    visits      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (url_link_id, day, dimension, value, is_bot)
);
COMMENT ON TABLE link_day_dim IS 'Visits per link per UTC day per breakdown value (rollup maintained by ingest with each batch, exactly once). Reports take top-N by summing visits over whole days; partial days at the edges of a range in a non-UTC zone come from visit_record.';
COMMENT ON COLUMN link_day_dim.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_day_dim.day IS 'UTC calendar day of visit_time.';
COMMENT ON COLUMN link_day_dim.dimension IS 'Breakdown: country (country_code), province (country_code/province), city (country_code/province/city), isp, browser (browser_type), browser_version (browser_type + '' '' + major version), os (os_type), device_type, referer_host, language.';
COMMENT ON COLUMN link_day_dim.value IS 'The value as defined per dimension; '''' (empty) when unknown or absent (e.g. no Referer, private address).';
COMMENT ON COLUMN link_day_dim.is_bot IS 'Whether these visits were flagged is_bot.';
COMMENT ON COLUMN link_day_dim.visits IS 'Visits with this value on this day.';

CREATE TABLE orphan_day (
    unique_code text NOT NULL,
    day         date NOT NULL,
    visits      bigint NOT NULL DEFAULT 0,
    bot_visits  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (unique_code, day)
);
COMMENT ON TABLE orphan_day IS 'Orphan visits (a code that matches no link, answered 404) per requested code per UTC day, maintained by ingest. The visits themselves are in visit_record with url_link_id NULL.';
COMMENT ON COLUMN orphan_day.unique_code IS 'The code that was requested.';
COMMENT ON COLUMN orphan_day.day IS 'UTC calendar day.';
COMMENT ON COLUMN orphan_day.visits IS 'Human orphan visits.';
COMMENT ON COLUMN orphan_day.bot_visits IS 'Bot orphan visits.';
