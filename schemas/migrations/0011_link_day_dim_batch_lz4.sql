-- 0011_link_day_dim_batch_lz4: link_day_dim_batch's arrays are compressed
-- with lz4 instead of pglz. A hot link's per-batch row (every dimension and
-- value it was seen with) passes the 2 kB TOAST threshold, and pglz took about
-- 5% of PostgreSQL's CPU while ingest loaded (perf, make bench); lz4 took about 0.4%
-- of it, and it decompresses faster for the compaction and reports. Existing
-- values keep their compression until rewritten. A server built without lz4
-- keeps pglz (notice).

DO $$
BEGIN
    ALTER TABLE link_day_dim_batch
        ALTER COLUMN dimension SET COMPRESSION lz4,
        ALTER COLUMN value SET COMPRESSION lz4,
        ALTER COLUMN visits SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not supported by this server; link_day_dim_batch stays with pglz';
END
$$;
