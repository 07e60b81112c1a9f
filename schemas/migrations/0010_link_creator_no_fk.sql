-- 0010_link_creator_no_fk: url_link.creator and updater stop being foreign
-- keys. Each check took a FOR KEY SHARE lock on the key's api_key row, so
-- every create statement by one key wrote a lock into that one row (a
-- MultiXact as soon as two batches ran at once). API key rows are never
-- deleted (revoking sets revoke_time), so every creator and updater the API
-- writes stays a valid api_key.id without the check.

ALTER TABLE url_link DROP CONSTRAINT IF EXISTS url_link_creator_fkey;
ALTER TABLE url_link DROP CONSTRAINT IF EXISTS url_link_updater_fkey;
COMMENT ON COLUMN url_link.creator IS 'api_key.id of the key that created the link (join on api_key.id; not a declared foreign key since 0010: API key rows are never deleted, and the check locked the key row on every create).';
COMMENT ON COLUMN url_link.updater IS 'api_key.id of the key that last changed the link (join on api_key.id; not a declared foreign key since 0010).';
