-- 0013_link_index_kinds: cheaper indexes to insert into for url_link, whose
-- inserts are most of PostgreSQL's CPU in bulk creation.
-- * The dedupe index on long_url_md5 becomes a hash index: it is only ever
--   probed for equality (same MD5, then same URL), and a hash index inserts
--   and finds an entry with a bucket page or two where the B-tree descended
--   three levels of random 33-byte keys, a cache miss per comparison once the
--   table outgrows the CPU caches (WAL-logged and crash-safe since
--   PostgreSQL 10). Bulk creates: ~3-4 us less PostgreSQL CPU per link.
-- * The GIN index on tags leaves out links without tags, which are most links:
--   GIN keeps a placeholder entry for every empty array. Queries by tag say
--   "tags <> '{}'" so that the planner can use it (a link with the tag has a
--   non-empty array anyway). Bulk creates: ~1-2 us less per link.
-- Rebuilding both takes a lock on url_link for the time of the build; on a
-- large table build them by hand first (DROP INDEX CONCURRENTLY, then the
-- two CREATE INDEX CONCURRENTLY below): an index that already has the new
-- definition is kept.

DO $$
BEGIN
    -- kept only if valid: a failed CREATE INDEX CONCURRENTLY leaves an invalid one
    IF NOT EXISTS (SELECT 1 FROM pg_indexes i JOIN pg_index x ON x.indexrelid =
                   format('%I.%I', i.schemaname, i.indexname)::regclass
                   WHERE i.indexname = 'url_link_md5_idx' AND x.indisvalid
                   AND i.indexdef LIKE '%USING hash (long_url_md5) WHERE (deleted = 0)') THEN
        DROP INDEX IF EXISTS url_link_md5_idx;
        CREATE INDEX url_link_md5_idx ON url_link USING hash (long_url_md5) WHERE deleted = 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_indexes i JOIN pg_index x ON x.indexrelid =
                   format('%I.%I', i.schemaname, i.indexname)::regclass
                   WHERE i.indexname = 'url_link_tags_idx' AND x.indisvalid
                   AND i.indexdef LIKE '%USING gin (tags) WHERE (tags <> ''{}''::text[])') THEN
        DROP INDEX IF EXISTS url_link_tags_idx;
        CREATE INDEX url_link_tags_idx ON url_link USING gin (tags) WHERE tags <> '{}';
    END IF;
END $$;
COMMENT ON INDEX url_link_md5_idx IS 'Dedupe lookup: links by MD5 of the long URL (equality only; hash index). Query with long_url_md5 = ... AND deleted = 0.';

COMMENT ON INDEX url_link_tags_idx IS 'Links by tag: query with tags @> ARRAY[...] AND tags <> ''{}'' (links without tags are not in this index).';
