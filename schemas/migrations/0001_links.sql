-- 0001_links: short links, the code pool and API keys.
-- Analysts read these tables directly; every table and column is commented.

CREATE TABLE api_key (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    key_prefix  varchar(12) NOT NULL,
    key_hash    char(64) NOT NULL UNIQUE,
    create_time timestamptz NOT NULL DEFAULT now(),
    revoke_time timestamptz
);
COMMENT ON TABLE api_key IS 'API keys for /api/v1. Only a SHA-256 of each key is stored; the key itself is shown once, when created.';
COMMENT ON COLUMN api_key.id IS 'Key id; url_link.creator refers to it.';
COMMENT ON COLUMN api_key.name IS 'Free-text label given when the key was created (who or what uses it).';
COMMENT ON COLUMN api_key.key_prefix IS 'First characters of the key, to recognise it in listings without revealing it.';
COMMENT ON COLUMN api_key.key_hash IS 'Lower-case hex SHA-256 of the whole key.';
COMMENT ON COLUMN api_key.create_time IS 'When the key was created.';
COMMENT ON COLUMN api_key.revoke_time IS 'When the key was revoked; NULL while it is valid.';

CREATE TABLE url_link (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code          varchar(64) NOT NULL UNIQUE,
    short_url     text NOT NULL,
    long_url      text NOT NULL CHECK (length(long_url) BETWEEN 1 AND 4096),
    long_url_md5  char(32) NOT NULL,
    strategy      smallint NOT NULL DEFAULT 0 CHECK (strategy IN (0, 1, 2, 3)),
    redirect_type smallint NOT NULL DEFAULT 302 CHECK (redirect_type IN (301, 302, 307, 308)),
    valid_since   timestamptz,
    expires_at    timestamptz,
    max_visits    bigint CHECK (max_visits > 0),
    tags          text[] NOT NULL DEFAULT '{}',
    disabled      boolean NOT NULL DEFAULT false,
    deleted       smallint NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
    creator       bigint REFERENCES api_key (id),
    updater       bigint REFERENCES api_key (id),
    create_time   timestamptz NOT NULL DEFAULT now(),
    update_time   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX url_link_md5_idx ON url_link (long_url_md5) WHERE deleted = 0;
CREATE INDEX url_link_tags_idx ON url_link USING gin (tags);
COMMENT ON TABLE url_link IS 'One row per short link: the code, where it points and the rules for redirecting. The source of truth; Redis only caches it. Rows are never removed: DELETE sets deleted = 1 and the code is never handed out again.';
COMMENT ON COLUMN url_link.id IS 'Link id; visit_record.url_link_id and the rollups refer to it.';
COMMENT ON COLUMN url_link.code IS 'The short code after the base URL: 1-8 base62 characters for generated codes, 1-64 of [A-Za-z0-9_-] for custom aliases. Case-sensitive. Seed name: unique_code.';
COMMENT ON COLUMN url_link.short_url IS 'The full short URL as handed out: base URL + "/" + code.';
COMMENT ON COLUMN url_link.long_url IS 'Target URL (http or https, at most 4096 characters).';
COMMENT ON COLUMN url_link.long_url_md5 IS 'Lower-case hex MD5 of long_url; finds an existing link for the same target (dedupe).';
COMMENT ON COLUMN url_link.strategy IS 'How the code was made: 0 random (pre-generated pool), 1 sequence (permuted counter), 2 hash (MD5 of the URL), 3 custom alias.';
COMMENT ON COLUMN url_link.redirect_type IS 'HTTP status of the redirect: 301, 302 (default), 307 or 308.';
COMMENT ON COLUMN url_link.valid_since IS 'Before this time the link answers 404; NULL = valid from creation.';
COMMENT ON COLUMN url_link.expires_at IS 'From this time on the link answers 410; NULL = never expires.';
COMMENT ON COLUMN url_link.max_visits IS 'After this many redirects the link answers 410; NULL = unlimited.';
COMMENT ON COLUMN url_link.tags IS 'Free-form labels (campaign, channel, ...) for listing and reports.';
COMMENT ON COLUMN url_link.disabled IS 'true: the link answers 410 until enabled again.';
COMMENT ON COLUMN url_link.deleted IS 'Soft delete: 1 = deleted (answers 410, code never reused), 0 = live.';
COMMENT ON COLUMN url_link.creator IS 'api_key.id of the key that created the link.';
COMMENT ON COLUMN url_link.updater IS 'api_key.id of the key that last changed the link.';
COMMENT ON COLUMN url_link.create_time IS 'When the link was created.';
COMMENT ON COLUMN url_link.update_time IS 'When the link was last changed.';

CREATE TABLE unique_code (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code        varchar(64) NOT NULL UNIQUE,
    status      smallint NOT NULL DEFAULT 0 CHECK (status IN (-1, 0, 1)),
    type        smallint NOT NULL DEFAULT 0 CHECK (type IN (0, 1, 2)),
    create_time timestamptz NOT NULL DEFAULT now(),
    update_time timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unique_code_unused_idx ON unique_code (id) WHERE status = 0;
COMMENT ON TABLE unique_code IS 'The code pool and registry of generated codes. Its unique constraint on code is the final word on collisions; random codes are generated here ahead of time and mirrored in a Redis set for fast claiming.';
COMMENT ON COLUMN unique_code.id IS 'Row id (claim order for the PostgreSQL fallback).';
COMMENT ON COLUMN unique_code.code IS 'The code (base62).';
COMMENT ON COLUMN unique_code.status IS '0 unused (in the pool), 1 used by a link, -1 invalid (never to be handed out).';
COMMENT ON COLUMN unique_code.type IS 'How the code was made: 0 random, 1 sequence, 2 hash.';
COMMENT ON COLUMN unique_code.create_time IS 'When the code was generated.';
COMMENT ON COLUMN unique_code.update_time IS 'When its status last changed.';

CREATE SEQUENCE url_link_code_seq AS bigint MINVALUE 0 START 0;
COMMENT ON SEQUENCE url_link_code_seq IS 'Counter behind the sequence strategy; each value is permuted (keyed Feistel network) before it becomes a code.';
