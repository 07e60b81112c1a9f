/* batch.c - builds a batch: COPY rows for visit_record (binary format,
 * straight into one growing buffer), the rollup input rows (length-prefixed),
 * rejects with their raw bytes, per partition next offsets and the months. */
#include "batch.h"

#include "errstr.h"
#include "event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void
batch_init(struct batch *b)
{
	memset(b, 0, sizeof(*b));
	b->min_ts_us = INT64_MAX;
	b->max_ts_us = INT64_MIN;
}

void
batch_reset(struct batch *b)
{
	for (size_t i = 0; i < b->nrejects; i++) {
		free(b->rejects[i].raw);
		free(b->rejects[i].reason);
	}
	b->nrejects = 0;
	for (int32_t i = 0; i < b->ntouched; i++)
		b->next_offset[b->touched[i]] = -1;
	b->ntouched = 0;
	b->copy.len = 0;
	b->roll.len = 0;
	b->rows = 0;
	b->messages = 0;
	b->nmonths = 0;
	b->opened_ms = 0;
	b->min_ts_us = INT64_MAX;
	b->max_ts_us = INT64_MIN;
}

void
batch_free(struct batch *b)
{
	batch_reset(b);
	free(b->copy.data);
	free(b->roll.data);
	free(b->row);
	free(b->rejects);
	free(b->next_offset);
	free(b->touched);
	free(b->months);
	memset(b, 0, sizeof(*b));
}

static int
reserve(struct batch_buf *buf, size_t more)
{
	size_t cap;
	char *p;

	if (buf->len + more <= buf->cap)
		return 0;
	cap = buf->cap ? buf->cap : 1 << 20;
	while (cap < buf->len + more)
		cap *= 2;
	if ((p = realloc(buf->data, cap)) == NULL)
		return -1;
	buf->data = p;
	buf->cap = cap;
	return 0;
}

static inline void
put_raw(struct batch_buf *buf, const void *s, size_t n)
{
	memcpy(buf->data + buf->len, s, n);
	buf->len += n;
}

/* Appends n bytes of s to out (size bytes, *len used), as many as fit
 * leaving room for a terminating NUL. */
static void
cat(char *out, size_t size, size_t *len, const char *s, size_t n)
{
	if (n > size - 1 - *len)
		n = size - 1 - *len;
	memcpy(out + *len, s, n);
	*len += n;
}

/* Writes the last width decimal digits of v (>= 0) at p. */
static void
digits(char *p, unsigned long long v, int width)
{
	while (width-- > 0) {
		p[width] = (char)('0' + v % 10);
		v /= 10;
	}
}

/* COPY's binary format (PostgreSQL's "Binary Format" of COPY): per field a
 * 32-bit big-endian length (-1: NULL) and the type's binary send form. */

static void
put_be(struct batch_buf *buf, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--)
		buf->data[buf->len++] = (char)(v >> (8 * i));
}

int
batch_put(struct batch_buf *buf, const void *s, size_t n)
{
	if (n == 0)
		return 0;
	if (reserve(buf, n) < 0)
		return -1;
	put_raw(buf, s, n);
	return 0;
}

int
batch_put_be(struct batch_buf *buf, uint64_t v, int bytes)
{
	if (reserve(buf, (size_t)bytes) < 0)
		return -1;
	put_be(buf, v, bytes);
	return 0;
}

int
batch_bin_bytes(struct batch_buf *buf, const char *s, size_t len)
{
	if (len > INT32_MAX || reserve(buf, 4 + len) < 0)
		return -1;
	put_be(buf, len, 4);
	put_raw(buf, s, len);
	return 0;
}

static int
bin_null(struct batch_buf *buf)
{
	if (reserve(buf, 4) < 0)
		return -1;
	put_be(buf, UINT32_MAX, 4);
	return 0;
}

/* A C string as text (or char(n), varchar); "" is NULL when empty_null. */
static int
bin_str(struct batch_buf *buf, const char *s, int empty_null)
{
	if (s == NULL || (empty_null && *s == '\0'))
		return bin_null(buf);
	return batch_bin_bytes(buf, s, strlen(s));
}

int
batch_bin_int(struct batch_buf *buf, int64_t v, int bytes)
{
	if (reserve(buf, 4 + (size_t)bytes) < 0)
		return -1;
	put_be(buf, (uint64_t)bytes, 4);
	put_be(buf, (uint64_t)v, bytes);
	return 0;
}

/* timestamptz: microseconds since 2000-01-01 00:00:00 UTC. */
int
batch_bin_ts(struct batch_buf *buf, int64_t unix_us)
{
	return batch_bin_int(buf, unix_us - BATCH_PG_EPOCH_US, 8);
}

/* inet (a host address, so cidr 0 and all bits) of nb address bytes, as
 * geo_lookup parsed them; NULL when nb is 0 (not an address). */
static int
bin_inet(struct batch_buf *buf, const unsigned char *a, size_t nb)
{
	if (nb == 0)
		return bin_null(buf);
	if (reserve(buf, 8 + nb) < 0)
		return -1;
	put_be(buf, 4 + (uint64_t)nb, 4);
	buf->data[buf->len++] = nb == 4 ? 2 : 3; /* PGSQL_AF_INET, PGSQL_AF_INET6 */
	buf->data[buf->len++] = (char)(nb * 8);  /* bits */
	buf->data[buf->len++] = 0;               /* not cidr */
	buf->data[buf->len++] = (char)nb;
	put_raw(buf, (const char *)a, nb);
	return 0;
}

/* The 11-byte signature, flags (32 bits, 0) and the header extension's
 * length (32 bits, 0: the literal's own terminating NUL is its last byte). */
const char batch_copy_header[BATCH_COPY_HEADER_SIZE] =
	"PGCOPY\n\377\r\n\0" "\0\0\0\0" "\0\0\0";
const char batch_copy_trailer[2] = { (char)0xff, (char)0xff };

/* The UTC date of us microseconds since the epoch (proleptic Gregorian,
 * H. Hinnant's civil_from_days, without gmtime_r's lock); *rem gets the
 * microseconds since that day's midnight. */
static void
civil(long long us, long long *y, long long *m, long long *d, long long *rem)
{
	const long long day_us = 86400LL * 1000000;
	long long days = us / day_us, z, era, doe, yoe, doy, mp;

	*rem = us % day_us;
	if (*rem < 0) {
		*rem += day_us;
		days--;
	}
	z = days + 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = yoe + era * 400 + (*m <= 2);
}

/* year * 12 + month - 1 of us microseconds since the epoch (UTC). */
static int32_t
month_of(long long us)
{
	long long y, m, d, rem;

	civil(us, &y, &m, &d, &rem);
	return (int32_t)(y * 12 + m - 1);
}

void
batch_format_ts(long long us, char *out, size_t out_size, int32_t *month)
{
	long long y, m, d, rem;
	char t[30];

	civil(us, &y, &m, &d, &rem);
	/* "YYYY-MM-DD HH:MM:SS.uuuuuu+00" */
	digits(t, (unsigned long long)y, 4);
	t[4] = '-';
	digits(t + 5, (unsigned long long)m, 2);
	t[7] = '-';
	digits(t + 8, (unsigned long long)d, 2);
	t[10] = ' ';
	digits(t + 11, (unsigned long long)(rem / 3600000000LL), 2);
	t[13] = ':';
	digits(t + 14, (unsigned long long)(rem / 60000000 % 60), 2);
	t[16] = ':';
	digits(t + 17, (unsigned long long)(rem / 1000000 % 60), 2);
	t[19] = '.';
	digits(t + 20, (unsigned long long)(rem % 1000000), 6);
	memcpy(t + 26, "+00", 4);
	if (out_size > 0) {
		size_t n = out_size - 1 < 29 ? out_size - 1 : 29;
		memcpy(out, t, n);
		out[n] = '\0';
	}
	if (month)
		*month = (int32_t)(y * 12 + m - 1);
}

int
batch_set_offset(struct batch *b, int32_t partition, int64_t next_offset)
{
	if (partition < 0)
		return -1;
	if (partition >= b->nparts) {
		int32_t n = b->nparts ? b->nparts : 64;
		int64_t *no;
		int32_t *t;

		while (n <= partition)
			n *= 2;
		if ((no = realloc(b->next_offset, (size_t)n * sizeof(*no))) == NULL)
			return -1;
		b->next_offset = no;
		if ((t = realloc(b->touched, (size_t)n * sizeof(*t))) == NULL)
			return -1;
		b->touched = t;
		for (int32_t i = b->nparts; i < n; i++)
			b->next_offset[i] = -1;
		b->nparts = n;
	}
	if (b->next_offset[partition] < 0)
		b->touched[b->ntouched++] = partition;
	if (next_offset > b->next_offset[partition])
		b->next_offset[partition] = next_offset;
	return 0;
}

/* Keeps b->months distinct and ascending: the loader creates partitions in
 * that order, so two lanes creating the same new months take their locks in
 * one order and never wait on each other in a cycle. */
static int
add_month(struct batch *b, int32_t month)
{
	size_t at = 0;

	while (at < b->nmonths && b->months[at] < month)
		at++;
	if (at < b->nmonths && b->months[at] == month)
		return 0;
	if (b->nmonths == b->months_cap) {
		size_t cap = b->months_cap ? 2 * b->months_cap : 8;
		int32_t *m = realloc(b->months, cap * sizeof(*m));
		if (m == NULL)
			return -1;
		b->months = m;
		b->months_cap = cap;
	}
	memmove(b->months + at + 1, b->months + at, (b->nmonths - at) * sizeof(*b->months));
	b->months[at] = month;
	b->nmonths++;
	return 0;
}

static int
add_reject(struct batch *b, int32_t partition, int64_t offset, const void *payload,
           size_t len, const char *reason)
{
	struct batch_reject *r;

	if (b->nrejects == b->rejects_cap) {
		size_t cap = b->rejects_cap ? 2 * b->rejects_cap : 16;
		struct batch_reject *n = realloc(b->rejects, cap * sizeof(*n));
		if (n == NULL)
			return -1;
		b->rejects = n;
		b->rejects_cap = cap;
	}
	r = &b->rejects[b->nrejects];
	r->partition = partition;
	r->offset = offset;
	r->raw_len = len;
	r->raw = malloc(len ? len : 1);
	r->reason = strdup(reason);
	if (r->raw == NULL || r->reason == NULL) {
		free(r->raw);
		free(r->reason);
		return -1;
	}
	if (len)
		memcpy(r->raw, payload, len);
	b->nrejects++;
	return 0;
}

int
batch_put_roll_field(struct batch_buf *buf, const char *s, size_t len)
{
	if (len > BATCH_ROLL_MAX)
		len = BATCH_ROLL_MAX;
	if (reserve(buf, 2 + len) < 0)
		return -1;
	buf->data[buf->len++] = (char)(len & 0xff);
	buf->data[buf->len++] = (char)(len >> 8);
	put_raw(buf, s, len);
	return 0;
}

/* A C string as a rollup input field. */
static int
roll_str(struct batch_buf *r, const char *s)
{
	return batch_put_roll_field(r, s, strlen(s));
}

/* "" for NULL: the link_day_dim value of an absent column. */
static const char *
dv(const char *s)
{
	return s ? s : "";
}

/* The rollup input row (batch.h): code, client_id and the ten
 * link_day_dim values defined in 0004_rollups.sql's comments. */
static int
put_roll(struct batch_buf *r, const struct event *ev, const struct enrich_row *er)
{
	const struct geo_result *g = &er->geo;
	const struct ua_result *u = &er->ua;
	const char *cc = dv(g->country_code), *prov = dv(g->province), *city = dv(g->city);
	const char *br = dv(u->browser.family), *bv = er->browser_version;
	char v2[sizeof(g->country_code) + sizeof(g->province) + 1];
	char v3[sizeof(g->country_code) + sizeof(g->province) + sizeof(g->city) + 2];
	char v6[sizeof(u->browser.family) + sizeof(er->browser_version) + 1];
	size_t n2 = 0, n3 = 0, n6 = 0;
	int rc = 0;

	if (*prov) {
		cat(v2, sizeof(v2), &n2, cc, strlen(cc));
		cat(v2, sizeof(v2), &n2, "/", 1);
		cat(v2, sizeof(v2), &n2, prov, strlen(prov));
	}
	v2[n2] = '\0';
	/* country/province/city, the province empty where GeoIP has none
	 * ("SG//Singapore"), as report_visit_dims (0006) builds it */
	if (*city) {
		cat(v3, sizeof(v3), &n3, cc, strlen(cc));
		cat(v3, sizeof(v3), &n3, "/", 1);
		cat(v3, sizeof(v3), &n3, prov, strlen(prov));
		cat(v3, sizeof(v3), &n3, "/", 1);
		cat(v3, sizeof(v3), &n3, city, strlen(city));
	}
	v3[n3] = '\0';
	cat(v6, sizeof(v6), &n6, br, strlen(br));
	if (*br && *bv) {
		cat(v6, sizeof(v6), &n6, " ", 1);
		cat(v6, sizeof(v6), &n6, bv, strcspn(bv, "."));
	}
	v6[n6] = '\0';
	rc |= batch_put_roll_field(r, ev->code, ev->code_len);
	rc |= batch_put_roll_field(r, er->client_id, DIGEST_SHA1_HEX_SIZE - 1);
	rc |= roll_str(r, cc);
	rc |= batch_put_roll_field(r, v2, n2);
	rc |= batch_put_roll_field(r, v3, n3);
	rc |= roll_str(r, dv(g->isp));
	rc |= roll_str(r, br);
	rc |= batch_put_roll_field(r, v6, n6);
	rc |= roll_str(r, dv(u->os.family));
	rc |= roll_str(r, dv(u->device_type));
	rc |= roll_str(r, er->referer_host);
	rc |= roll_str(r, er->language);
	return rc ? -1 : 0;
}

static int
put_row(struct batch *b, const struct event *ev, const struct enrich_row *er)
{
	const struct geo_result *g = &er->geo;
	const struct ua_result *u = &er->ua;
	struct batch_buf *c = &b->copy;
	int rc = 0;

	if (reserve(c, 2) < 0)
		return -1;
	put_be(c, BATCH_COPY_NCOLUMNS, 2);
	rc |= batch_bin_int(c, ev->id, 8);
	rc |= ev->has_link_id ? batch_bin_int(c, ev->link_id, 8) : bin_null(c);
	rc |= batch_bin_bytes(c, ev->code, ev->code_len);
	rc |= bin_str(c, er->client_id, 0);
	rc |= bin_inet(c, g->addr, g->addr_len);
	rc |= batch_bin_ts(c, ev->ts);
	rc |= batch_bin_int(c, ev->status, 2);
	rc |= ev->user_agent ? batch_bin_bytes(c, ev->user_agent, ev->user_agent_len) : bin_null(c);
	rc |= bin_str(c, ev->referer, 0);
	rc |= bin_str(c, er->referer_host, 1);
	rc |= bin_str(c, ev->accept_language, 0);
	rc |= bin_str(c, er->language, 1);
	rc |= bin_str(c, ev->host, 0);
	rc |= bin_str(c, ev->query, 0);
	rc |= bin_str(c, g->country_code, 1);
	rc |= bin_str(c, g->country, 1);
	rc |= bin_str(c, g->province, 1);
	rc |= bin_str(c, g->city, 1);
	rc |= bin_str(c, g->isp, 1);
	rc |= g->asn >= 0 ? batch_bin_int(c, g->asn, 8) : bin_null(c);
	rc |= bin_str(c, u->browser.family, 1);
	rc |= bin_str(c, er->browser_version, 1);
	rc |= bin_str(c, u->os.family, 1);
	rc |= bin_str(c, er->os_version, 1);
	rc |= bin_str(c, u->device_type, 1);
	rc |= bin_str(c, u->device.family, 1);
	rc |= bin_str(c, u->device.brand, 1);
	rc |= bin_str(c, u->device.model, 1);
	rc |= batch_bin_int(c, u->is_bot != 0, 1);
	if (rc)
		return -1;
	return put_roll(&b->roll, ev, er);
}

/* Typical sizes of one event's rows (a phone's visit: ~560 bytes of COPY
 * binary, ~160 of rollup input), for batch_prealloc. */
#define TYPICAL_COPY_ROW 640
#define TYPICAL_ROLL_ROW 256

/* Grows buf to at least cap bytes and writes every page of it once. */
static int
prefault(struct batch_buf *buf, size_t cap)
{
	if (cap > buf->cap) {
		char *p = realloc(buf->data, cap);

		if (p == NULL)
			return -1;
		buf->data = p;
		buf->cap = cap;
	}
	memset(buf->data + buf->len, 0, buf->cap - buf->len);
	return 0;
}

int
batch_prealloc(struct batch *b, size_t rows)
{
	if (rows > b->row_cap) {
		struct batch_row *n = realloc(b->row, rows * sizeof(*n));

		if (n == NULL)
			return -1;
		b->row = n;
		b->row_cap = rows;
	}
	memset(b->row + b->rows, 0, (b->row_cap - b->rows) * sizeof(*b->row));
	return prefault(&b->copy, rows * TYPICAL_COPY_ROW) < 0 ||
	    prefault(&b->roll, rows * TYPICAL_ROLL_ROW) < 0 ? -1 : 0;
}

/* Room for one more struct batch_row. */
static int
reserve_row(struct batch *b)
{
	size_t cap;
	struct batch_row *n;

	if (b->rows < b->row_cap)
		return 0;
	cap = b->row_cap ? 2 * b->row_cap : 1024;
	if ((n = realloc(b->row, cap * sizeof(*n))) == NULL)
		return -1;
	b->row = n;
	b->row_cap = cap;
	return 0;
}

int
batch_add(struct batch *b, struct enricher *e, int32_t partition, int64_t offset,
          const void *payload, size_t len, char *errstr, size_t errstr_size)
{
	struct enrich_row er;
	struct event ev;
	json_t *root = NULL;
	char reason[256];
	size_t mark = b->copy.len, rmark = b->roll.len;
	struct batch_row *row;

	if (batch_set_offset(b, partition, offset + 1) < 0 || reserve_row(b) < 0)
		goto nomem;
	if (event_parse(payload ? payload : "", payload ? len : 0, &root, &ev, reason,
	    sizeof(reason)) < 0) {
		if (add_reject(b, partition, offset, payload, payload ? len : 0, reason) < 0)
			goto nomem;
		b->messages++;
		return 0;
	}
	if (enrich_event(e, &ev, &er, errstr, errstr_size) < 0) {
		json_decref(root);
		return -1;
	}
	if (put_row(b, &ev, &er) < 0 || add_month(b, month_of(ev.ts)) < 0) {
		b->copy.len = mark;
		b->roll.len = rmark;
		json_decref(root);
		goto nomem;
	}
	row = &b->row[b->rows];
	row->id = ev.id;
	row->ts_us = ev.ts;
	row->link_id = ev.link_id;
	row->has_link = ev.has_link_id != 0;
	row->is_bot = er.ua.is_bot != 0;
	row->partition = partition;
	row->copy_off = mark;
	row->roll_off = rmark;
	if (ev.ts < b->min_ts_us)
		b->min_ts_us = ev.ts;
	if (ev.ts > b->max_ts_us)
		b->max_ts_us = ev.ts;
	json_decref(root);
	b->rows++;
	b->messages++;
	return 1;
nomem:
	errstr_set(errstr, errstr_size, "out of memory");
	return -1;
}
