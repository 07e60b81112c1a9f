-- 0008_link_period_dims: the breakdowns summed per UTC calendar month and per
-- ISO week (Monday to Sunday, UTC days), so a report reads whole months from
-- link_month_dim, whole weeks of the rest from link_week_dim and only the
-- remaining days from link_day_dim_row: one row per key and month or week
-- instead of one per day (about 30 or 7 times fewer for a busy link). Both
-- mirror link_day_dim_row (the compacted part of link_day_dim): every function
-- that adds to link_day_dim_row adds the same visits to them in the same
-- statement, so for any month or week their sums equal link_day_dim_row's at
-- every snapshot. Rows of link_day_dim_batch (not yet compacted) are in none.

CREATE TABLE link_month_dim (
    url_link_id bigint NOT NULL,
    month       date NOT NULL CHECK (month = date_trunc('month', month)::date),
    dimension   text NOT NULL,
    value       text NOT NULL,
    is_bot      boolean NOT NULL,
    visits      bigint NOT NULL,
    PRIMARY KEY (url_link_id, month, dimension, value, is_bot) INCLUDE (visits)
);
COMMENT ON TABLE link_month_dim IS 'link_day_dim_row summed per UTC calendar month: one row per (url_link_id, month, dimension, value, is_bot). Kept in step with link_day_dim_row by link_day_dim_compact() and the link_day_dim insert trigger (same statement), so it never includes link_day_dim_batch rows. Total for a range of whole months: link_month_dim for those months plus link_day_dim_batch rows of their days. Deleting link_day_dim_row rows (retention) must delete the matching months here too.';
COMMENT ON COLUMN link_month_dim.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_month_dim.month IS 'First day of the UTC calendar month of visit_time.';
COMMENT ON COLUMN link_month_dim.dimension IS 'Breakdown, as link_day_dim.dimension.';
COMMENT ON COLUMN link_month_dim.value IS 'Value, as link_day_dim.value.';
COMMENT ON COLUMN link_month_dim.is_bot IS 'Whether these visits were flagged is_bot.';
COMMENT ON COLUMN link_month_dim.visits IS 'Sum of link_day_dim_row.visits of this key over the month''s days.';

CREATE TABLE link_week_dim (
    url_link_id bigint NOT NULL,
    week        date NOT NULL CHECK (week = date_trunc('week', week)::date),
    dimension   text NOT NULL,
    value       text NOT NULL,
    is_bot      boolean NOT NULL,
    visits      bigint NOT NULL,
    PRIMARY KEY (url_link_id, week, dimension, value, is_bot) INCLUDE (visits)
);
COMMENT ON TABLE link_week_dim IS 'link_day_dim_row summed per ISO week of UTC days (week = its Monday): one row per (url_link_id, week, dimension, value, is_bot). Kept in step with link_day_dim_row by link_day_dim_compact() and the link_day_dim insert trigger (same statement), so it never includes link_day_dim_batch rows. Deleting link_day_dim_row rows (retention) must delete the matching weeks here too.';
COMMENT ON COLUMN link_week_dim.url_link_id IS 'url_link.id.';
COMMENT ON COLUMN link_week_dim.week IS 'Monday of the ISO week (UTC days) of visit_time.';
COMMENT ON COLUMN link_week_dim.dimension IS 'Breakdown, as link_day_dim.dimension.';
COMMENT ON COLUMN link_week_dim.value IS 'Value, as link_day_dim.value.';
COMMENT ON COLUMN link_week_dim.is_bot IS 'Whether these visits were flagged is_bot.';
COMMENT ON COLUMN link_week_dim.visits IS 'Sum of link_day_dim_row.visits of this key over the week''s days.';

INSERT INTO link_month_dim (url_link_id, month, dimension, value, is_bot, visits)
SELECT url_link_id, date_trunc('month', day)::date, dimension, value, is_bot, sum(visits)
FROM link_day_dim_row GROUP BY 1, 2, 3, 4, 5;
INSERT INTO link_week_dim (url_link_id, week, dimension, value, is_bot, visits)
SELECT url_link_id, date_trunc('week', day)::date, dimension, value, is_bot, sum(visits)
FROM link_day_dim_row GROUP BY 1, 2, 3, 4, 5;

CREATE OR REPLACE FUNCTION link_day_dim_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO link_day_dim_row AS t (url_link_id, day, dimension, value, is_bot, visits)
    VALUES (NEW.url_link_id, NEW.day, NEW.dimension, NEW.value, NEW.is_bot, NEW.visits)
    ON CONFLICT (url_link_id, day, dimension, value, is_bot)
    DO UPDATE SET visits = t.visits + EXCLUDED.visits;
    INSERT INTO link_month_dim AS t (url_link_id, month, dimension, value, is_bot, visits)
    VALUES (NEW.url_link_id, date_trunc('month', NEW.day)::date, NEW.dimension, NEW.value,
            NEW.is_bot, NEW.visits)
    ON CONFLICT (url_link_id, month, dimension, value, is_bot)
    DO UPDATE SET visits = t.visits + EXCLUDED.visits;
    INSERT INTO link_week_dim AS t (url_link_id, week, dimension, value, is_bot, visits)
    VALUES (NEW.url_link_id, date_trunc('week', NEW.day)::date, NEW.dimension, NEW.value,
            NEW.is_bot, NEW.visits)
    ON CONFLICT (url_link_id, week, dimension, value, is_bot)
    DO UPDATE SET visits = t.visits + EXCLUDED.visits;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION link_day_dim_insert() IS 'INSTEAD OF INSERT on the link_day_dim view: adds the row''s visits to link_day_dim_row and to its month in link_month_dim and its week in link_week_dim.';

CREATE OR REPLACE FUNCTION link_day_dim_compact() RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM link_day_dim_batch
        RETURNING url_link_id, day, is_bot, dimension, value, visits
    ), folded AS (
        SELECT g.url_link_id, g.day, u.dimension, u.value, g.is_bot, sum(u.visits) AS visits
        FROM gone g CROSS JOIN LATERAL unnest(g.dimension, g.value, g.visits)
            AS u (dimension, value, visits)
        GROUP BY 1, 2, 3, 4, 5
    ), merged AS (
        INSERT INTO link_day_dim_row AS t (url_link_id, day, dimension, value, is_bot, visits)
        SELECT * FROM folded ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (url_link_id, day, dimension, value, is_bot)
        DO UPDATE SET visits = t.visits + EXCLUDED.visits
    ), months AS (
        INSERT INTO link_month_dim AS t (url_link_id, month, dimension, value, is_bot, visits)
        SELECT url_link_id, date_trunc('month', day)::date, dimension, value, is_bot, sum(visits)
        FROM folded GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (url_link_id, month, dimension, value, is_bot)
        DO UPDATE SET visits = t.visits + EXCLUDED.visits
    ), weeks AS (
        INSERT INTO link_week_dim AS t (url_link_id, week, dimension, value, is_bot, visits)
        SELECT url_link_id, date_trunc('week', day)::date, dimension, value, is_bot, sum(visits)
        FROM folded GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (url_link_id, week, dimension, value, is_bot)
        DO UPDATE SET visits = t.visits + EXCLUDED.visits
    )
    SELECT count(*) FROM gone
$$;
COMMENT ON FUNCTION link_day_dim_compact() IS 'Moves the link_day_dim_batch rows (those committed when it starts) into link_day_dim_row and adds them to link_month_dim and link_week_dim, in one statement (sums per key unchanged; safe next to ingest and another compaction). Returns the number of batch rows folded.';
