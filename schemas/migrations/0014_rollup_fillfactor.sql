-- 0014_rollup_fillfactor: room on every page of the rollup counters that
-- ingest updates in place with each batch (link_hour, link_day, link_total,
-- orphan_day), so that an update can put the row's new version on the same
-- page (a HOT update: no new entry in the primary key's index, and the old
-- version pruned by the next visit to the page) instead of moving it to
-- another page and indexing it again. Each batch upserts one row per link
-- hour, link day, link and orphan code day it touched; at fillfactor 100
-- every page is full and nearly every one of those updates moved its row.
-- Pages written before this keep their layout until they are rewritten.

ALTER TABLE link_hour SET (fillfactor = 70);
ALTER TABLE link_day SET (fillfactor = 70);
ALTER TABLE link_total SET (fillfactor = 70);
ALTER TABLE orphan_day SET (fillfactor = 70);
