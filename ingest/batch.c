/* batch.c - builds a batch: COPY text rows for visit_record (escaped once,
 * straight into one growing buffer), rejects with their raw bytes, per
 * partition next offsets and the months touched. */
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
	b->copy_len = 0;
	b->rows = 0;
	b->messages = 0;
	b->nmonths = 0;
	b->opened_ms = 0;
}

void
batch_free(struct batch *b)
{
	batch_reset(b);
	free(b->copy);
	free(b->rejects);
	free(b->next_offset);
	free(b->touched);
	free(b->months);
	memset(b, 0, sizeof(*b));
}

static int
reserve(struct batch *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->copy_len + more <= b->copy_cap)
		return 0;
	cap = b->copy_cap ? b->copy_cap : 1 << 20;
	while (cap < b->copy_len + more)
		cap *= 2;
	if ((p = realloc(b->copy, cap)) == NULL)
		return -1;
	b->copy = p;
	b->copy_cap = cap;
	return 0;
}

static inline void
put_raw(struct batch *b, const char *s, size_t n)
{
	memcpy(b->copy + b->copy_len, s, n);
	b->copy_len += n;
}

int
batch_put_text(struct batch *b, const char *s, size_t len)
{
	size_t i, start;

	if (s == NULL) {
		if (reserve(b, 3) < 0)
			return -1;
		put_raw(b, "\\N\t", 3);
		return 0;
	}
	/* Worst case every byte doubles. */
	if (reserve(b, 2 * len + 1) < 0)
		return -1;
	for (i = start = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc;

		if (c > '\\' || (c >= ' ' && c != '\\'))
			continue;
		switch (c) {
		case '\\': esc = '\\'; break;
		case '\t': esc = 't'; break;
		case '\n': esc = 'n'; break;
		case '\r': esc = 'r'; break;
		case '\b': esc = 'b'; break;
		case '\f': esc = 'f'; break;
		case '\v': esc = 'v'; break;
		default: continue;
		}
		put_raw(b, s + start, i - start);
		b->copy[b->copy_len++] = '\\';
		b->copy[b->copy_len++] = esc;
		start = i + 1;
	}
	put_raw(b, s + start, len - start);
	b->copy[b->copy_len++] = '\t';
	return 0;
}

/* A C string field; "" is NULL when empty_null. */
static int
put_str(struct batch *b, const char *s, int empty_null)
{
	if (s == NULL || (empty_null && *s == '\0'))
		return batch_put_text(b, NULL, 0);
	return batch_put_text(b, s, strlen(s));
}

static int
put_ll(struct batch *b, long long v)
{
	char num[24];
	int n = snprintf(num, sizeof(num), "%lld\t", v);

	if (reserve(b, (size_t)n) < 0)
		return -1;
	put_raw(b, num, (size_t)n);
	return 0;
}

void
batch_format_ts(long long us, char *out, size_t out_size, int32_t *month)
{
	time_t secs = (time_t)(us / 1000000);
	struct tm tm;

	gmtime_r(&secs, &tm);
	snprintf(out, out_size, "%04d-%02d-%02d %02d:%02d:%02d.%06lld+00", tm.tm_year + 1900,
	    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us % 1000000);
	if (month)
		*month = (int32_t)((tm.tm_year + 1900) * 12 + tm.tm_mon);
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

static int
add_month(struct batch *b, int32_t month)
{
	for (size_t i = 0; i < b->nmonths; i++)
		if (b->months[i] == month)
			return 0;
	if (b->nmonths == b->months_cap) {
		size_t cap = b->months_cap ? 2 * b->months_cap : 8;
		int32_t *m = realloc(b->months, cap * sizeof(*m));
		if (m == NULL)
			return -1;
		b->months = m;
		b->months_cap = cap;
	}
	b->months[b->nmonths++] = month;
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

static int
put_row(struct batch *b, const struct event *ev, const struct enrich_row *er, int32_t *month)
{
	char ts[40];
	const struct geo_result *g = &er->geo;
	const struct ua_result *u = &er->ua;
	int rc = 0;

	batch_format_ts(ev->ts, ts, sizeof(ts), month);
	rc |= put_ll(b, ev->id);
	rc |= ev->has_link_id ? put_ll(b, ev->link_id) : batch_put_text(b, NULL, 0);
	rc |= batch_put_text(b, ev->code, ev->code_len);
	rc |= put_str(b, er->client_id, 0);
	rc |= put_str(b, er->ip_valid ? ev->ip : NULL, 1);
	rc |= put_str(b, ts, 0);
	rc |= put_ll(b, ev->status);
	rc |= batch_put_text(b, ev->user_agent, ev->user_agent_len);
	rc |= put_str(b, ev->referer, 0);
	rc |= put_str(b, er->referer_host, 1);
	rc |= put_str(b, ev->accept_language, 0);
	rc |= put_str(b, er->language, 1);
	rc |= put_str(b, ev->host, 0);
	rc |= put_str(b, ev->query, 0);
	rc |= put_str(b, g->country_code, 1);
	rc |= put_str(b, g->country, 1);
	rc |= put_str(b, g->province, 1);
	rc |= put_str(b, g->city, 1);
	rc |= put_str(b, g->isp, 1);
	rc |= g->asn >= 0 ? put_ll(b, g->asn) : batch_put_text(b, NULL, 0);
	rc |= put_str(b, u->browser.family, 1);
	rc |= put_str(b, er->browser_version, 1);
	rc |= put_str(b, u->os.family, 1);
	rc |= put_str(b, er->os_version, 1);
	rc |= put_str(b, u->device_type, 1);
	rc |= put_str(b, u->device.family, 1);
	rc |= put_str(b, u->device.brand, 1);
	rc |= put_str(b, u->device.model, 1);
	rc |= put_str(b, u->is_bot ? "t" : "f", 0);
	if (rc)
		return -1;
	b->copy[b->copy_len - 1] = '\n'; /* the last tab ends the row */
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
	size_t mark = b->copy_len;
	int32_t month;

	if (batch_set_offset(b, partition, offset + 1) < 0)
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
	if (put_row(b, &ev, &er, &month) < 0 || add_month(b, month) < 0) {
		b->copy_len = mark;
		json_decref(root);
		goto nomem;
	}
	json_decref(root);
	b->rows++;
	b->messages++;
	return 1;
nomem:
	errstr_set(errstr, errstr_size, "out of memory");
	return -1;
}
