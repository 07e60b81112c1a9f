/* batch.h - one ingest batch: the COPY rows (binary format) of visit_record
 * built from consumed messages, the rejected messages, the next offset of each partition
 * touched and the UTC months whose partitions must exist. */
#ifndef LP_INGEST_BATCH_H
#define LP_INGEST_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "enrich.h"

/* Columns of visit_record filled by COPY, in row order; rows are in COPY's
 * binary format, sent after batch_copy_header and before batch_copy_trailer. */
#define BATCH_COPY_COLUMNS \
	"id, url_link_id, unique_code, client_id, client_ip, visit_time, http_status, " \
	"user_agent, referer, referer_host, accept_language, language, host, query_string, " \
	"country_code, country, province, city, isp, asn, browser_type, browser_version, " \
	"os_type, os_version, device_type, device_family, device_brand, device_model, is_bot"
#define BATCH_COPY_NCOLUMNS 29
#define BATCH_COPY_HEADER_SIZE 19
/* PostgreSQL's epoch (2000-01-01 UTC) in microseconds since the Unix one:
 * binary timestamps and dates count from it. */
#define BATCH_PG_EPOCH_US INT64_C(946684800000000)

extern const char batch_copy_header[BATCH_COPY_HEADER_SIZE];
extern const char batch_copy_trailer[2];

/* The rollup input row of each visit (rollup.c reads them; one per row of
 * copy, in the same order; its link, time and bot flag are in its struct
 * batch_row), BATCH_ROLL_FIELDS fields: unique_code, client_id (40 hex
 * digits), then the ten link_day_dim values of 0004_rollups.sql ('' when
 * unknown), in rollup.c's dimension order. Each field is a 2-byte
 * little-endian length and that many bytes, as they are (no escapes). */
#define BATCH_ROLL_FIELDS 12
#define BATCH_ROLL_MAX 0xFFFF /* longer values are cut (none comes close) */

/* Where one row lives in the two buffers, its key and what its rollups
 * group by. */
struct batch_row {
	int64_t id;                 /* visit_record.id */
	int64_t ts_us;              /* visit_time, microseconds since the epoch */
	int64_t link_id;            /* url_link_id, when has_link */
	int32_t partition;          /* Kafka partition of the message */
	uint8_t has_link;           /* 0: an orphan visit (url_link_id NULL) */
	uint8_t is_bot;
	size_t copy_off;            /* start of the row in copy (ends at the next row's) */
	size_t roll_off;            /* start of the row in roll */
};

/* A message that failed validation. raw and reason are owned by the batch. */
struct batch_reject {
	int32_t partition;
	int64_t offset;
	unsigned char *raw;
	size_t raw_len;
	char *reason;
};

/* A growing byte buffer (owned by whoever owns the struct). */
struct batch_buf {
	char *data;
	size_t len, cap;
};

struct batch {
	struct batch_buf copy;      /* COPY binary rows of BATCH_COPY_COLUMNS */
	size_t rows;                /* rows in copy */
	struct batch_buf roll;      /* rollup input rows (BATCH_ROLL_FIELDS) */
	struct batch_row *row;      /* owned: rows entries */
	size_t row_cap;
	int64_t min_ts_us, max_ts_us; /* range of visit_time over the rows */
	size_t messages;            /* messages taken (rows + rejects) */
	struct batch_reject *rejects; /* owned array */
	size_t nrejects, rejects_cap;
	int64_t *next_offset;       /* owned, indexed by partition; -1 untouched */
	int32_t nparts;             /* length of next_offset */
	int32_t *touched;           /* owned: partitions with next_offset set */
	int32_t ntouched;
	int32_t *months;            /* owned: year * 12 + month - 1, distinct, ascending */
	size_t nmonths, months_cap;
	int64_t opened_ms;          /* monotonic ms when the first message came */
};

/* Zeroes b (an empty batch owning nothing yet). */
void batch_init(struct batch *b);
/* Empties b, keeping its buffers for reuse. */
void batch_reset(struct batch *b);
/* Frees what b owns. */
void batch_free(struct batch *b);

/* Grows b's buffers to hold rows typical rows and writes their pages once,
 * so that a new process's first batches do not take a page fault per 4 KiB
 * of each buffer as it grows (costly on a VM). Returns 0 or -1 (no memory;
 * b is still usable and grows on demand). */
int batch_prealloc(struct batch *b, size_t rows);

/* Takes one message (value len bytes at payload, may be NULL) of
 * partition/offset: parses, validates and enriches it, then appends a COPY row
 * or a reject. Records offset + 1 as the partition's next offset. Returns 1
 * for a row, 0 for a reject, -1 when out of memory or enrichment fails
 * (errstr set; the batch is then unchanged but for possibly grown buffers). */
int batch_add(struct batch *b, struct enricher *e, int32_t partition, int64_t offset,
              const void *payload, size_t len, char *errstr, size_t errstr_size);

/* Records the next offset of partition without a message (e.g. skipping). */
int batch_set_offset(struct batch *b, int32_t partition, int64_t next_offset);

/* Appends one rollup input field. Returns 0 or -1 (no memory). */
int batch_put_roll_field(struct batch_buf *buf, const char *s, size_t len);

/* Appenders to a growing buffer, each 0 or -1 (no memory): n bytes as they
 * are; a bare big-endian integer of 'bytes' bytes; and fields of COPY's
 * binary format: an integer (int8, int4 or date, int2, bool: 8, 4, 2, 1
 * bytes) or bytes (text), each after its 32-bit length. */
int batch_put(struct batch_buf *buf, const void *s, size_t n);
int batch_put_be(struct batch_buf *buf, uint64_t v, int bytes);
int batch_bin_int(struct batch_buf *buf, int64_t v, int bytes);
int batch_bin_bytes(struct batch_buf *buf, const char *s, size_t len);
/* A timestamptz field of microseconds since the Unix epoch. */
int batch_bin_ts(struct batch_buf *buf, int64_t unix_us);

/* Formats microseconds since the epoch as "YYYY-MM-DD HH:MM:SS.uuuuuu+00"
 * into out (at least 32 bytes); *month receives year * 12 + month - 1. */
void batch_format_ts(long long us, char *out, size_t out_size, int32_t *month);

#endif
