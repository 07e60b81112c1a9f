-- 0018: a visit_reject row is one message, told apart by its bytes too. The
-- key was (topic, kafka_partition, kafka_offset), and ingest inserts with ON
-- CONFLICT DO NOTHING so that a message loaded twice (a second consumer that
-- had lost its partitions) is kept once; but after a topic is recreated (or
-- truncated) its offsets start again, and a new malformed message at an
-- offset an old reject held was dropped. Same offset, same bytes: once;
-- other bytes: kept as well.
ALTER TABLE visit_reject DROP CONSTRAINT IF EXISTS visit_reject_topic_kafka_partition_kafka_offset_key;
CREATE UNIQUE INDEX visit_reject_message_key
    ON visit_reject (topic, kafka_partition, kafka_offset, md5(raw));
COMMENT ON INDEX visit_reject_message_key IS 'One row per message: a message loaded twice is kept once; another message at a reused offset (topic recreated) is kept too.';
