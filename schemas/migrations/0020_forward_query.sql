-- 0020: a link may forward the query string of the visit to its target
-- (marketing adds utm_* parameters to one short link per channel). Adding a
-- column with a constant default rewrites nothing in PostgreSQL 11 and later.
ALTER TABLE url_link ADD COLUMN IF NOT EXISTS forward_query boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN url_link.forward_query IS 'true: a redirect appends the visit''s query string (what follows "?" in /{code}?..., or "&" in the SMS form /?{code}&...) to long_url: after long_url''s own query with "&" ("?" when it has none), before its "#fragment", a "#" in it as %23; not when the Location (as sent: %XX escapes, punycode host) would pass 4096 bytes (the target alone then). false (default): the target as stored. Set at create or by PATCH; a create asking for it never returns an existing link (dedupe).';
