-- 0007_link_day_dim_batches: link_day_dim becomes a view over two tables so
-- ingest writes one row per link, day and bot flag per batch instead of one
-- upsert per breakdown value (about 3.8 per visit in small batches, which
-- cost several times the visit row). Readers keep reading link_day_dim and
-- sum visits per key (reports does); link_day_dim_compact() folds batch rows
-- into link_day_dim_row, and ingest runs it in the background.

ALTER TABLE link_day_dim RENAME TO link_day_dim_row;
COMMENT ON TABLE link_day_dim_row IS 'Compacted part of link_day_dim: one row per (url_link_id, day, dimension, value, is_bot), written by link_day_dim_compact(). Read link_day_dim (the view) rather than this table.';

CREATE TABLE link_day_dim_batch (
    url_link_id bigint NOT NULL,
    day         date NOT NULL,
    is_bot      boolean NOT NULL,
    dimension   text[] NOT NULL,
    value       text[] NOT NULL,
    visits      bigint[] NOT NULL,
    CHECK (cardinality(dimension) = cardinality(value) AND cardinality(value) = cardinality(visits))
);
CREATE INDEX link_day_dim_batch_idx ON link_day_dim_batch (url_link_id, day);
COMMENT ON TABLE link_day_dim_batch IS 'Recent part of link_day_dim: one row per ingest batch per (url_link_id, day, is_bot), written in the batch''s transaction (exactly once); element i of the three arrays is one (dimension, value, visits). link_day_dim_compact() moves rows into link_day_dim_row. Read link_day_dim (the view) rather than this table.';
COMMENT ON COLUMN link_day_dim_batch.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_day_dim_batch.day IS 'UTC calendar day of visit_time.';
COMMENT ON COLUMN link_day_dim_batch.is_bot IS 'Whether these visits were flagged is_bot.';
COMMENT ON COLUMN link_day_dim_batch.dimension IS 'Breakdown of each element, as link_day_dim.dimension.';
COMMENT ON COLUMN link_day_dim_batch.value IS 'Value of each element, as link_day_dim.value.';
COMMENT ON COLUMN link_day_dim_batch.visits IS 'Visits of each element in this batch.';

CREATE VIEW link_day_dim AS
    SELECT url_link_id, day, dimension, value, is_bot, visits FROM link_day_dim_row
    UNION ALL
    SELECT b.url_link_id, b.day, u.dimension, u.value, b.is_bot, u.visits
    FROM link_day_dim_batch b CROSS JOIN LATERAL unnest(b.dimension, b.value, b.visits)
        AS u (dimension, value, visits);
COMMENT ON VIEW link_day_dim IS 'Visits per link per UTC day per breakdown value (rollup written by ingest with each batch, exactly once). A key (url_link_id, day, dimension, value, is_bot) may have several rows (compacted ones and recent batches): always sum(visits) grouped by the key. Reports take top-N by summing visits over whole days; partial days at the edges of a range in a non-UTC zone come from visit_record. Inserting into the view adds to link_day_dim_row.';
COMMENT ON COLUMN link_day_dim.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_day_dim.day IS 'UTC calendar day of visit_time.';
COMMENT ON COLUMN link_day_dim.dimension IS 'Breakdown: country (country_code), province (country_code/province), city (country_code/province/city), isp, browser (browser_type), browser_version (browser_type + '' '' + major version), os (os_type), device_type, referer_host, language.';
COMMENT ON COLUMN link_day_dim.value IS 'The value as defined per dimension; '''' (empty) when unknown or absent (e.g. no Referer, private address).';
COMMENT ON COLUMN link_day_dim.is_bot IS 'Whether these visits were flagged is_bot.';
COMMENT ON COLUMN link_day_dim.visits IS 'Visits counted by this row; the key''s total is the sum over its rows.';

CREATE FUNCTION link_day_dim_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO link_day_dim_row AS t (url_link_id, day, dimension, value, is_bot, visits)
    VALUES (NEW.url_link_id, NEW.day, NEW.dimension, NEW.value, NEW.is_bot, NEW.visits)
    ON CONFLICT (url_link_id, day, dimension, value, is_bot)
    DO UPDATE SET visits = t.visits + EXCLUDED.visits;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION link_day_dim_insert() IS 'INSTEAD OF INSERT on the link_day_dim view: adds the row''s visits to link_day_dim_row.';
CREATE TRIGGER link_day_dim_insert INSTEAD OF INSERT ON link_day_dim
    FOR EACH ROW EXECUTE FUNCTION link_day_dim_insert();

-- Folds every batch row into link_day_dim_row. Deleting and
-- adding happen in one statement, so readers see either side; rows a
-- concurrent ingest batch commits meanwhile are not in this statement's
-- snapshot and stay; rows a concurrent compaction deleted first are skipped.
CREATE FUNCTION link_day_dim_compact() RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM link_day_dim_batch
        RETURNING url_link_id, day, is_bot, dimension, value, visits
    ), merged AS (
        INSERT INTO link_day_dim_row AS t (url_link_id, day, dimension, value, is_bot, visits)
        SELECT g.url_link_id, g.day, u.dimension, u.value, g.is_bot, sum(u.visits)
        FROM gone g CROSS JOIN LATERAL unnest(g.dimension, g.value, g.visits)
            AS u (dimension, value, visits)
        GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (url_link_id, day, dimension, value, is_bot)
        DO UPDATE SET visits = t.visits + EXCLUDED.visits
    )
    SELECT count(*) FROM gone
$$;
COMMENT ON FUNCTION link_day_dim_compact() IS 'Moves the link_day_dim_batch rows (those committed when it starts) into link_day_dim_row (sums per key unchanged; safe next to ingest and another compaction). Returns the number of batch rows folded.';
