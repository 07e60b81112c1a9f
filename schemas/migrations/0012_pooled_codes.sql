-- 0012_pooled_codes: a random code handed to the Redis pool is marked
-- "pooled" (status 2) when it is generated, and creating a link with it
-- writes nothing to unique_code: url_link's unique constraint on code is the
-- claim. Until now every create claimed its popped code with an UPDATE
-- (status 0 -> 1), a non-HOT update (status is in unique_code_unused_idx's
-- predicate) that rewrote the row and two index entries: about 45% of
-- PostgreSQL's CPU per link in bulk creates (make bench, 2 cores). Codes with
-- status 0 are now only PostgreSQL's reserve, claimed (0 -> 1) while Redis is
-- down; codes pooled before this migration keep status 0 and may be both in
-- the reserve and in Redis, where url_link's constraint settles who gets one.

ALTER TABLE unique_code DROP CONSTRAINT unique_code_status_check,
    ADD CONSTRAINT unique_code_status_check CHECK (status IN (-1, 0, 1, 2));

COMMENT ON TABLE unique_code IS 'The registry of generated codes (random, sequence, hash) and the random-code pool. Its unique constraint on code is the final word on collisions between generated codes; url_link''s unique constraint on code is the claim. Random codes are generated here ahead of time: most are mirrored in a Redis set for fast claiming (status 2), a reserve stays for creation while Redis is down (status 0).';
COMMENT ON COLUMN unique_code.status IS '0 unused: PostgreSQL''s reserve, claimed (set to 1) by creation while Redis is down; 2 pooled: handed to the Redis set lp:pool:<length>, in use exactly when url_link has the code (creation writes nothing here); 1 used by a link (claimed from the reserve, or generated at creation); -1 invalid (clashed with an alias, never to be handed out). Codes in use: join url_link on code.';
COMMENT ON COLUMN unique_code.update_time IS 'When its status last changed (a pooled code keeps its generation time when a link takes it).';
