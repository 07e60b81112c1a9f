-- 0003_link_totals: all-time per-link counters kept by ingest in the same
-- transaction as the visits (the API's "hits" and the reports' all-time count).

CREATE TABLE link_total (
    url_link_id bigint PRIMARY KEY,
    visits      bigint NOT NULL DEFAULT 0,
    bot_visits  bigint NOT NULL DEFAULT 0,
    first_visit timestamptz,
    last_visit  timestamptz
);
COMMENT ON TABLE link_total IS 'All-time visit counters per link, maintained by ingest with each batch (exactly once). Seed 002''s hit count.';
COMMENT ON COLUMN link_total.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_total.visits IS 'All visits ever loaded for the link (bots included).';
COMMENT ON COLUMN link_total.bot_visits IS 'Of those, visits flagged is_bot.';
COMMENT ON COLUMN link_total.first_visit IS 'Earliest visit_time loaded.';
COMMENT ON COLUMN link_total.last_visit IS 'Latest visit_time loaded.';
