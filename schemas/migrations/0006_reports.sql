-- 0006_reports: what the reports program needs beyond the rollups of 0004:
-- the breakdown values of one raw visit, defined exactly as link_day_dim
-- defines them, so partial days read from visit_record add up with whole days
-- read from link_day_dim.

CREATE FUNCTION report_visit_dims(country_code text, province text, city text, isp text,
                                  browser_type text, browser_version text, os_type text,
                                  device_type text, referer_host text, language text)
RETURNS TABLE (dimension text, value text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT * FROM (VALUES
        ('country', coalesce(country_code, '')),
        ('province', CASE WHEN coalesce(province, '') = '' THEN ''
                          ELSE coalesce(country_code, '') || '/' || province END),
        ('city', CASE WHEN coalesce(city, '') = '' THEN ''
                      ELSE coalesce(country_code, '') || '/' || coalesce(province, '') || '/' || city END),
        ('isp', coalesce(isp, '')),
        ('browser', coalesce(browser_type, '')),
        ('browser_version', CASE WHEN coalesce(browser_type, '') = '' THEN ''
                                 WHEN coalesce(browser_version, '') = '' THEN browser_type
                                 ELSE browser_type || ' ' || split_part(browser_version, '.', 1) END),
        ('os', coalesce(os_type, '')),
        ('device_type', coalesce(device_type, '')),
        ('referer_host', coalesce(referer_host, '')),
        ('language', coalesce(language, ''))
    ) AS d (dimension, value)
$$;
COMMENT ON FUNCTION report_visit_dims(text, text, text, text, text, text, text, text, text, text) IS
    'The link_day_dim (dimension, value) pairs of one visit_record row (pass its country_code, province, city, isp, browser_type, browser_version, os_type, device_type, referer_host, language): ten rows, '''' for unknown. reports uses it for the parts of a range that whole UTC days of link_day_dim cannot answer.';

-- Top-N breakdowns read every (dimension, value) row of a link's days: with
-- the values in the index, that is an index-only scan instead of one heap
-- page per few rows.
CREATE INDEX link_day_dim_report_idx ON link_day_dim (url_link_id, day)
    INCLUDE (dimension, value, is_bot, visits);
COMMENT ON INDEX link_day_dim_report_idx IS 'Covering index for reports: top-N per dimension over a range of days is an index-only scan.';
