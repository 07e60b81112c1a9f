/* event.c - visit event validation, both encodings of
 * schemas/visit_event.schema.json (v2 array, v1 object): every field is checked
 * (presence, type, bounds, nothing unknown) so a bad event is rejected, never
 * loaded half-right. */
#include "event.h"

#include "errstr.h"

#include <stdlib.h>
#include <string.h>

enum ftype { F_INT, F_STR, F_STR_NULL, F_INT_NULL };

struct field {
	const char *name;
	enum ftype type;
	size_t max_chars; /* strings: maxLength in characters (0: none) */
};

/* The schema's fields in v2's array order (v1 names them), "v" first (checked
 * before anything else). */
static const struct field fields[] = {
	{ "v", F_INT, 0 },
	{ "id", F_INT, 0 },
	{ "ts", F_INT, 0 },
	{ "code", F_STR, 64 },
	{ "link_id", F_INT_NULL, 0 },
	{ "status", F_INT, 0 },
	{ "ip", F_STR, 64 },
	{ "user_agent", F_STR_NULL, 8192 },
	{ "referer", F_STR_NULL, 8192 },
	{ "accept_language", F_STR_NULL, 1024 },
	{ "host", F_STR_NULL, 1024 },
	{ "query", F_STR_NULL, 8192 },
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *
type_name(enum ftype t)
{
	switch (t) {
	case F_INT: return "integer";
	case F_STR: return "string";
	case F_STR_NULL: return "string or null";
	case F_INT_NULL: return "integer or null";
	}
	return "?";
}

/* Characters (code points) of a valid UTF-8 string. */
static size_t
utf8_chars(const char *s, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			n++;
	return n;
}

static int
check_field(const struct field *f, json_t *v, char *reason, size_t reason_size)
{
	int ok;

	switch (f->type) {
	case F_INT: ok = json_is_integer(v); break;
	case F_INT_NULL: ok = json_is_integer(v) || json_is_null(v); break;
	case F_STR: ok = json_is_string(v); break;
	case F_STR_NULL: ok = json_is_string(v) || json_is_null(v); break;
	default: ok = 0;
	}
	if (!ok) {
		errstr_set(reason, reason_size, "wrong type: %s: expected %s", f->name,
		    type_name(f->type));
		return -1;
	}
	/* characters <= bytes: count them only when the bytes exceed the limit */
	if (json_is_string(v) && f->max_chars && json_string_length(v) > f->max_chars &&
	    utf8_chars(json_string_value(v), json_string_length(v)) > f->max_chars) {
		errstr_set(reason, reason_size, "bad value: %s: longer than %zu characters",
		    f->name, f->max_chars);
		return -1;
	}
	return 0;
}

static const char *
str_or_null(json_t *v, size_t *len)
{
	if (json_is_null(v)) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = json_string_length(v);
	return json_string_value(v);
}

/* The fields' values (val[i] of fields[i], all present and of their type). */
static int
fill(json_t *const *val, struct event *ev, char *reason, size_t reason_size)
{
	json_t *v;
	long long st;

	memset(ev, 0, sizeof(*ev));
	ev->id = json_integer_value(val[1]);
	if (ev->id < 1) {
		errstr_set(reason, reason_size, "bad value: id: %lld is below 1", ev->id);
		return -1;
	}
	ev->ts = json_integer_value(val[2]);
	if (ev->ts < 0 || ev->ts > EVENT_TS_MAX) {
		errstr_set(reason, reason_size, "bad value: ts: %lld is outside 0..%lld",
		    ev->ts, EVENT_TS_MAX);
		return -1;
	}
	v = val[3];
	ev->code = json_string_value(v);
	ev->code_len = json_string_length(v);
	if (ev->code_len == 0) {
		errstr_set(reason, reason_size, "bad value: code: empty");
		return -1;
	}
	v = val[4];
	if (json_is_integer(v)) {
		ev->link_id = json_integer_value(v);
		ev->has_link_id = 1;
	}
	st = json_integer_value(val[5]);
	if (st != 301 && st != 302 && st != 307 && st != 308 && st != 404 && st != 410) {
		errstr_set(reason, reason_size,
		    "bad value: status: %lld is not one of 301, 302, 307, 308, 404, 410", st);
		return -1;
	}
	ev->status = (int)st;
	ev->ip = json_string_value(val[6]);
	ev->user_agent = str_or_null(val[7], &ev->user_agent_len);
	ev->referer = str_or_null(val[8], NULL);
	ev->accept_language = str_or_null(val[9], NULL);
	ev->host = str_or_null(val[10], NULL);
	ev->query = str_or_null(val[11], NULL);
	return 0;
}

/* v2: [2, id, ts, code, link_id, status, ip, user_agent, referer,
 * accept_language, host, query], positions as in fields[]. Fills val[]. */
static int
array_fields(json_t *r, json_t **val, char *reason, size_t reason_size)
{
	size_t n = json_array_size(r);

	if (n == 0) {
		errstr_set(reason, reason_size, "missing field: v");
		return -1;
	}
	val[0] = json_array_get(r, 0);
	if (!json_is_integer(val[0]) || json_integer_value(val[0]) != 2)
		return -2;
	if (n > NFIELDS) {
		errstr_set(reason, reason_size, "unknown field: [%zu] (%zu elements, expected %zu)",
		    NFIELDS, n, NFIELDS);
		return -1;
	}
	if (n < NFIELDS) {
		errstr_set(reason, reason_size, "missing field: %s ([%zu]; %zu elements, expected %zu)",
		    fields[n].name, n, n, NFIELDS);
		return -1;
	}
	for (size_t i = 1; i < NFIELDS; i++)
		val[i] = json_array_get(r, i);
	return 0;
}

/* v1: an object with exactly the fields' names. Fills val[]. */
static int
object_fields(json_t *r, json_t **val, char *reason, size_t reason_size)
{
	const char *key;
	json_t *v;
	size_t i, missing = 0;

	if ((val[0] = json_object_get(r, "v")) == NULL) {
		errstr_set(reason, reason_size, "missing field: v");
		return -1;
	}
	if (!json_is_integer(val[0]) || json_integer_value(val[0]) != 1)
		return -2;
	for (i = 1; i < NFIELDS; i++)
		if ((val[i] = json_object_get(r, fields[i].name)) == NULL && missing == 0)
			missing = i;
	/* Keys are unique (JSON_REJECT_DUPLICATES): with every field present
	 * and no more keys than fields there is no unknown one to look for. An
	 * unknown field is reported before a missing one. */
	if (missing || json_object_size(r) != NFIELDS) {
		json_object_foreach(r, key, v) {
			for (i = 0; i < NFIELDS; i++)
				if (strcmp(key, fields[i].name) == 0)
					break;
			if (i == NFIELDS) {
				errstr_set(reason, reason_size, "unknown field: %.64s", key);
				return -1;
			}
		}
	}
	if (missing) {
		errstr_set(reason, reason_size, "missing field: %s", fields[missing].name);
		return -1;
	}
	return 0;
}

int
event_parse(const void *buf, size_t len, json_t **root, struct event *ev,
            char *reason, size_t reason_size)
{
	json_error_t jerr;
	json_t *r, *val[NFIELDS];
	int rc;

	*root = NULL;
	if ((r = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		errstr_set(reason, reason_size, "bad JSON: %s (line %d, column %d)",
		    jerr.text, jerr.line, jerr.column);
		return -1;
	}
	/* The version decides how the rest is read: check it first. Without
	 * JSON_DECODE_ANY, json_loadb returns only an array or an object. */
	rc = json_is_array(r) ? array_fields(r, val, reason, reason_size) :
	    object_fields(r, val, reason, reason_size);
	if (rc == -2) {
		char *txt = json_dumps(val[0], JSON_ENCODE_ANY | JSON_COMPACT);

		errstr_set(reason, reason_size, "unknown schema version: %.64s (%s)",
		    txt ? txt : "?", json_is_array(r) ? "an array must be version 2" :
		    "an object must be version 1");
		free(txt);
		goto bad;
	}
	if (rc < 0)
		goto bad;
	for (size_t i = 1; i < NFIELDS; i++)
		if (check_field(&fields[i], val[i], reason, reason_size) < 0)
			goto bad;
	if (fill(val, ev, reason, reason_size) < 0)
		goto bad;
	*root = r;
	return 0;
bad:
	json_decref(r);
	return -1;
}
