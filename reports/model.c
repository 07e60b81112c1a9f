/* model.c - builds report objects (schemas/report.schema.json) with jansson:
 * zero-filled skeletons first, then the counts the queries find. */
#include "model.h"

#include <string.h>
#include <time.h>

const char *const model_dims[] = {
	"country", "province", "city", "isp", "browser", "browser_version", "os",
	"device_type", "referer_host", "language",
};

int
model_dim_index(const char *name)
{
	for (int d = 0; d < MODEL_NDIMS; d++)
		if (name[0] == model_dims[d][0] && strcmp(name, model_dims[d]) == 0)
			return d;
	return -1;
}

static json_t *
now_rfc3339(void)
{
	char buf[32];
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_string(buf);
}

static json_t *
range_obj(const struct model_range *r)
{
	return json_pack("{s:s, s:s, s:s, s:b, s:I, s:I}", "from", r->from, "to", r->to,
	    "tz", r->tz, "exclude_bots", r->exclude_bots, "top_n", (json_int_t)r->top_n,
	    "days", (json_int_t)json_array_size(r->days));
}

json_t *
model_zero_series(const json_t *labels, const char *key, int bots)
{
	json_t *a = json_array();
	size_t i;
	const json_t *v;

	json_array_foreach(labels, i, v) {
		json_t *o = json_object();

		json_object_set_new(o, key, json_copy((json_t *)v));
		json_object_set_new(o, "visits", json_integer(0));
		json_object_set_new(o, "uniques", json_integer(0));
		if (bots)
			json_object_set_new(o, "bot_visits", json_integer(0));
		json_array_append_new(a, o);
	}
	return a;
}

/* A report's series: references to the shared zero entries. */
static json_t *
series(const json_t *zero)
{
	json_t *a = json_array();
	size_t i;
	const json_t *v;

	json_array_foreach(zero, i, v)
		json_array_append(a, (json_t *)v);
	return a;
}

/* Fills the parts every report shares; rep already has "link" or "tag". */
static json_t *
skeleton(json_t *rep, long long all_time, long long all_time_bots, const struct model_range *r)
{
	json_t *top = json_object();

	json_object_set_new(rep, "range", range_obj(r));
	json_object_set_new(rep, "totals", json_pack("{s:i, s:i, s:o, s:n, s:n}", "visits", 0,
	    "uniques", 0, "bot_visits", r->exclude_bots ? json_null() : json_integer(0),
	    "first_visit", "last_visit"));
	json_object_set_new(rep, "daily", series(r->zero_days));
	if (r->zero_hours != NULL)
		json_object_set_new(rep, "hourly", series(r->zero_hours));
	for (int i = 0; i < MODEL_NDIMS; i++)
		json_object_set_new(top, model_dims[i], json_array());
	json_object_set_new(rep, "top", top);
	json_object_set_new(rep, "all_time_visits", json_integer(all_time));
	json_object_set_new(rep, "all_time_bot_visits", json_integer(all_time_bots));
	json_object_set_new(rep, "generated_at", now_rfc3339());
	return rep;
}

json_t *
model_new_link(const struct model_link *l, const struct model_range *r)
{
	json_t *tags = json_loads(l->tags_json, 0, NULL), *rep;

	if (tags == NULL || !json_is_array(tags)) {
		json_decref(tags);
		return NULL;
	}
	rep = json_pack("{s:{s:s, s:s, s:s, s:s, s:o, s:b}}", "link", "code", l->code,
	    "short_url", l->short_url, "long_url", l->long_url, "created_at", l->created_at,
	    "tags", tags, "deleted", l->deleted);
	if (rep == NULL)
		return NULL;
	return skeleton(rep, l->all_time, l->all_time_bots, r);
}

json_t *
model_new_tag(const char *tag, json_t *codes, long long all_time, long long all_time_bots,
              const struct model_range *r)
{
	json_t *rep = json_pack("{s:s, s:o}", "tag", tag, "links", codes);

	if (rep == NULL)
		return NULL;
	return skeleton(rep, all_time, all_time_bots, r);
}

/* The object to set figures in: totals, or series entry idx, first made
 * the report's own when it is still a shared zero entry (json_copy: a new
 * object whose values are replaced, never modified, by the setters). */
static json_t *
target(json_t *rep, int kind, long long idx)
{
	json_t *a, *o, *own;

	if (kind == 't')
		return json_object_get(rep, "totals");
	a = json_object_get(rep, kind == 'd' ? "daily" : "hourly");
	if (a == NULL || idx < 0 || (size_t)idx >= json_array_size(a))
		return NULL;
	o = json_array_get(a, (size_t)idx);
	if (o->refcount == 1)  /* already the report's own */
		return o;
	if ((own = json_copy(o)) == NULL || json_array_set_new(a, (size_t)idx, own) < 0)
		return NULL;
	return own;
}

void
model_set_counts(json_t *rep, int kind, long long idx, long long visits, long long bots,
                 const char *first, const char *last)
{
	json_t *o = target(rep, kind, idx);

	if (o == NULL)
		return;
	json_object_set_new(o, "visits", json_integer(visits));
	if (json_is_integer(json_object_get(o, "bot_visits")))
		json_object_set_new(o, "bot_visits", json_integer(bots));
	if (kind == 't')
		model_set_first_last(rep, first, last);
}

void
model_set_uniques(json_t *rep, int kind, long long idx, long long uniques)
{
	json_t *o = target(rep, kind, idx);

	if (o != NULL)
		json_object_set_new(o, "uniques", json_integer(uniques));
}

void
model_set_first_last(json_t *rep, const char *first, const char *last)
{
	json_t *t = json_object_get(rep, "totals");

	json_object_set_new(t, "first_visit", first ? json_string(first) : json_null());
	json_object_set_new(t, "last_visit", last ? json_string(last) : json_null());
}

void
model_top_add(json_t *rep, const char *dim, const char *value, long long visits, long long bots)
{
	json_t *a = json_object_get(json_object_get(rep, "top"), dim), *o;

	if (a == NULL)
		return;
	/* built directly: json_pack's format parsing was a third of a round's
	 * top-N time in --all (perf) */
	if ((o = json_object()) == NULL)
		return;
	json_object_set_new_nocheck(o, "value", *value ? json_string(value) : json_null());
	json_object_set_new_nocheck(o, "visits", json_integer((json_int_t)visits));
	if (!json_is_null(json_object_get(json_object_get(rep, "totals"), "bot_visits")))
		json_object_set_new_nocheck(o, "bot_visits", json_integer(bots));
	json_array_append_new(a, o);
}

long long
model_total(const json_t *rep, const char *key)
{
	return json_integer_value(json_object_get(json_object_get(rep, "totals"), key));
}

json_t *
model_index_new(const struct model_range *r)
{
	return json_pack("{s:o, s:o, s:[]}", "range", range_obj(r), "generated_at", now_rfc3339(),
	    "links");
}

/* A copy (caller owns) of o's member key, or NULL. The index copies rather
 * than references: it outlives the reports, whose values --all takes back a
 * round at a time (arena.h). */
static json_t *
copy_of(const json_t *o, const char *key)
{
	return json_deep_copy(json_object_get(o, key));
}

static json_t *
index_entry(const json_t *rep, const char *file)
{
	const json_t *t = json_object_get(rep, "totals");

	return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o}", "file", file,
	    "visits", copy_of(t, "visits"), "uniques", copy_of(t, "uniques"),
	    "bot_visits", copy_of(t, "bot_visits"), "last_visit", copy_of(t, "last_visit"),
	    "all_time_visits", copy_of(rep, "all_time_visits"));
}

void
model_index_add(json_t *index, const json_t *rep, const char *file)
{
	const json_t *l = json_object_get(rep, "link");
	json_t *e = index_entry(rep, file);

	json_object_set_new(e, "code", copy_of(l, "code"));
	json_object_set_new(e, "short_url", copy_of(l, "short_url"));
	json_array_append_new(json_object_get(index, "links"), e);
}

void
model_index_set_combined(json_t *index, const json_t *rep, const char *file)
{
	json_t *e = index_entry(rep, file);

	json_object_set_new(e, "tag", copy_of(rep, "tag"));
	json_object_set_new(index, "combined", e);
}
