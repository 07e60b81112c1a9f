-- 0017: what client_id hashes, and how referer_host and language are
-- normalised (the fortieth session: punycode, no trailing dot, NULL for a
-- host that is not UTF-8; RFC 4647 ranges, '_' as '-').
COMMENT ON COLUMN visit_record.client_id IS 'Visitor identity: lower-case hex SHA-1 of the event''s ip text || ''&'' || user_agent (user_agent '''' when absent). The redirector writes ip canonical, as host(client_ip) prints it (IPv4 dotted, IPv6 compressed lower case), so in SQL (with pgcrypto): encode(digest(host(client_ip) || ''&'' || coalesce(user_agent, ''''), ''sha1''), ''hex''). Counts unique visitors.';
COMMENT ON COLUMN visit_record.referer_host IS 'Host part of referer by libcurl: lower case, without port or trailing dot, international names in punycode (xn--...). NULL when referer is absent or unparsable, or its percent-decoded host is not UTF-8.';
COMMENT ON COLUMN visit_record.language IS 'Primary language range of accept_language: the RFC 4647 range (1-8 letters, then subtags of 1-8 letters or digits) with the highest q, lower case, ''_'' written ''-'', e.g. en-us or zh-cn. NULL when there is none ("*" is none).';
