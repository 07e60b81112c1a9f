-- 0002_visits: the visits fact table (monthly partitions), ingest bookkeeping
-- (offsets stored with the data, rejected events).

CREATE TABLE visit_record (
    id              bigint NOT NULL,
    url_link_id     bigint,
    unique_code     varchar(64) NOT NULL,
    client_id       char(40) NOT NULL,
    client_ip       inet,
    visit_time      timestamptz NOT NULL,
    http_status     smallint NOT NULL,
    user_agent      text,
    referer         text,
    referer_host    text,
    accept_language text,
    language        text,
    host            text,
    query_string    text,
    country_code    char(2),
    country         text,
    province        text,
    city            text,
    isp             text,
    asn             bigint,
    browser_type    text,
    browser_version text,
    os_type         text,
    os_version      text,
    device_type     text,
    device_family   text,
    device_brand    text,
    device_model    text,
    is_bot          boolean NOT NULL DEFAULT false,
    deleted         smallint NOT NULL DEFAULT 0,
    creator         bigint NOT NULL DEFAULT 0,
    updater         bigint NOT NULL DEFAULT 0,
    create_time     timestamptz NOT NULL DEFAULT now(),
    update_time     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, visit_time)
) PARTITION BY RANGE (visit_time);
CREATE INDEX visit_record_link_time_idx ON visit_record (url_link_id, visit_time);
CREATE INDEX visit_record_code_time_idx ON visit_record (unique_code, visit_time);

COMMENT ON TABLE visit_record IS 'One row per redirect request (visit event), enriched by ingest. Partitioned by calendar month (UTC) of visit_time: visit_record_YYYYMM; retention = dropping old partitions. Orphan visits (unknown code, 404) are kept too, with url_link_id NULL.';
COMMENT ON COLUMN visit_record.id IS 'Visit event id (64-bit, time-ordered: ms since 2024-01-01 << 22 | worker << 12 | sequence). Unique per event; a replayed event is stored once.';
COMMENT ON COLUMN visit_record.url_link_id IS 'url_link.id of the link visited; NULL for an orphan visit (no such code).';
COMMENT ON COLUMN visit_record.unique_code IS 'The code requested (as sent, for orphans too).';
COMMENT ON COLUMN visit_record.client_id IS 'Visitor identity: lower-case hex SHA-1 of client_ip || ''&'' || user_agent (user_agent '''' when absent). Counts unique visitors.';
COMMENT ON COLUMN visit_record.client_ip IS 'Client address: the TCP peer, or the right-most untrusted X-Forwarded-For hop when the peer is a trusted proxy.';
COMMENT ON COLUMN visit_record.visit_time IS 'When the redirector answered (microseconds, UTC).';
COMMENT ON COLUMN visit_record.http_status IS 'HTTP status the redirector sent: 301/302/307/308 redirect, 404 unknown or not yet valid, 410 expired, over max visits, disabled or deleted.';
COMMENT ON COLUMN visit_record.user_agent IS 'User-Agent header as sent (NULL when absent).';
COMMENT ON COLUMN visit_record.referer IS 'Referer header as sent (NULL when absent).';
COMMENT ON COLUMN visit_record.referer_host IS 'Lower-case host part of referer (NULL when absent or unparsable).';
COMMENT ON COLUMN visit_record.accept_language IS 'Accept-Language header as sent (NULL when absent).';
COMMENT ON COLUMN visit_record.language IS 'Primary language tag of accept_language (highest q), lower case, e.g. en-us or zh-cn.';
COMMENT ON COLUMN visit_record.host IS 'Host header of the request (which short domain was used).';
COMMENT ON COLUMN visit_record.query_string IS 'Query string after the code (without "?"), NULL when none.';
COMMENT ON COLUMN visit_record.country_code IS 'ISO 3166-1 alpha-2 country of client_ip (GeoLite2); NULL for private/reserved or unknown addresses.';
COMMENT ON COLUMN visit_record.country IS 'Country name in the configured locale (en by default, e.g. zh-CN gives 中国).';
COMMENT ON COLUMN visit_record.province IS 'First subdivision (province, state) in the configured locale.';
COMMENT ON COLUMN visit_record.city IS 'City in the configured locale.';
COMMENT ON COLUMN visit_record.isp IS 'ISP or AS organisation, from the optional ISP/ASN database; NULL when none is configured.';
COMMENT ON COLUMN visit_record.asn IS 'Autonomous system number, from the optional ISP/ASN database; NULL when unknown.';
COMMENT ON COLUMN visit_record.browser_type IS 'Browser family by uap-core (e.g. Chrome, Mobile Safari).';
COMMENT ON COLUMN visit_record.browser_version IS 'Browser version major.minor.patch (parts present only).';
COMMENT ON COLUMN visit_record.os_type IS 'Operating system family by uap-core (e.g. Mac OS X, Android).';
COMMENT ON COLUMN visit_record.os_version IS 'Operating system version major.minor.patch (the seed stored the OS name here by mistake; this is the version).';
COMMENT ON COLUMN visit_record.device_type IS 'desktop, mobile, tablet, bot, tv, console or other (rules in README).';
COMMENT ON COLUMN visit_record.device_family IS 'Device family by uap-core (e.g. iPhone, Spider, Other).';
COMMENT ON COLUMN visit_record.device_brand IS 'Device brand by uap-core (e.g. Apple, Samsung).';
COMMENT ON COLUMN visit_record.device_model IS 'Device model by uap-core.';
COMMENT ON COLUMN visit_record.is_bot IS 'true for crawlers, link-preview fetchers and HTTP libraries (rules in README); reports keep them out of human totals.';
COMMENT ON COLUMN visit_record.deleted IS 'Seed column, always 0 (visits are not soft-deleted).';
COMMENT ON COLUMN visit_record.creator IS 'Seed column, always 0.';
COMMENT ON COLUMN visit_record.updater IS 'Seed column, always 0.';
COMMENT ON COLUMN visit_record.create_time IS 'When ingest stored the row.';
COMMENT ON COLUMN visit_record.update_time IS 'When ingest stored the row (rows are not updated).';

-- Creates the month partition holding ts if it does not exist; ingest calls
-- it ahead of time for every month a batch touches.
CREATE FUNCTION visit_record_ensure_partition(ts timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    m    timestamptz := date_trunc('month', ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    name text := 'visit_record_' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass(name) IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext(name));
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF visit_record FOR VALUES FROM (%L) TO (%L)',
                           name, m, m + interval '1 month');
            EXECUTE format('COMMENT ON TABLE %I IS %L', name,
                           'visit_record rows of ' || to_char(m AT TIME ZONE 'UTC', 'YYYY-MM') || ' (UTC)');
        END IF;
    END IF;
    RETURN name;
END $$;
COMMENT ON FUNCTION visit_record_ensure_partition(timestamptz) IS 'Creates visit_record_YYYYMM for the UTC month of ts if missing; returns its name.';

-- In UTC: this function adds the month in the session's TimeZone, which on
-- a server not in UTC made bounds off the month or overlapping (0015
-- replaces it with one that does not depend on the zone).
SET LOCAL TimeZone = 'UTC';
SELECT visit_record_ensure_partition(now() + make_interval(months => i)) FROM generate_series(-1, 2) AS i;

CREATE TABLE ingest_offset (
    consumer_group text NOT NULL,
    topic          text NOT NULL,
    kafka_partition integer NOT NULL,
    next_offset    bigint NOT NULL,
    update_time    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, kafka_partition)
);
COMMENT ON TABLE ingest_offset IS 'Kafka offsets owned by PostgreSQL: committed in the same transaction as the rows they produced, so each event is loaded exactly once. The consumer seeks here on partition assignment.';
COMMENT ON COLUMN ingest_offset.consumer_group IS 'Kafka consumer group of the ingest process.';
COMMENT ON COLUMN ingest_offset.topic IS 'Kafka topic.';
COMMENT ON COLUMN ingest_offset.kafka_partition IS 'Kafka partition number.';
COMMENT ON COLUMN ingest_offset.next_offset IS 'Offset of the next message to load (last loaded + 1).';
COMMENT ON COLUMN ingest_offset.update_time IS 'When this partition last committed a batch.';

CREATE TABLE visit_reject (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset    bigint NOT NULL,
    raw             bytea NOT NULL,
    reason          text NOT NULL,
    create_time     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, kafka_partition, kafka_offset)
);
COMMENT ON TABLE visit_reject IS 'Malformed visit events (bad JSON, missing field, wrong type, unknown schema version), kept with their raw bytes; never dropped, never blocking a partition.';
COMMENT ON COLUMN visit_reject.id IS 'Row id.';
COMMENT ON COLUMN visit_reject.topic IS 'Kafka topic the message came from.';
COMMENT ON COLUMN visit_reject.kafka_partition IS 'Kafka partition of the message.';
COMMENT ON COLUMN visit_reject.kafka_offset IS 'Kafka offset of the message.';
COMMENT ON COLUMN visit_reject.raw IS 'The message value as received.';
COMMENT ON COLUMN visit_reject.reason IS 'Why it was rejected, naming the field.';
COMMENT ON COLUMN visit_reject.create_time IS 'When ingest stored it.';

CREATE TABLE ingest_lost (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group  text NOT NULL,
    topic           text NOT NULL,
    kafka_partition integer NOT NULL,
    from_offset     bigint NOT NULL,
    to_offset       bigint,
    reason          text NOT NULL,
    create_time     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ingest_lost IS 'Offset ranges ingest could not read (e.g. "offset out of range" after the broker dropped old messages). Every row is also logged at error level; normally empty.';
COMMENT ON COLUMN ingest_lost.id IS 'Row id.';
COMMENT ON COLUMN ingest_lost.consumer_group IS 'Kafka consumer group.';
COMMENT ON COLUMN ingest_lost.topic IS 'Kafka topic.';
COMMENT ON COLUMN ingest_lost.kafka_partition IS 'Kafka partition.';
COMMENT ON COLUMN ingest_lost.from_offset IS 'First offset that could not be read (the stored next_offset).';
COMMENT ON COLUMN ingest_lost.to_offset IS 'First offset available again (where ingest resumed); NULL when unknown.';
COMMENT ON COLUMN ingest_lost.reason IS 'What the broker said.';
COMMENT ON COLUMN ingest_lost.create_time IS 'When ingest noticed.';
