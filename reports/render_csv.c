/* render_csv.c - the long CSV layout: one row per figure, with the section
 * (link, range, totals, all_time, daily, hourly, top) and dimension named. */
#include "render_csv.h"

#include "errstr.h"
#include "model.h"

#include <string.h>

/* A field a spreadsheet would read as a formula, one starting with = + - @
 * tab or CR (OWASP's CSV injection list) after any spaces (which LibreOffice
 * trims on import when asked to), gets a leading apostrophe, which Excel,
 * LibreOffice and Google Sheets show as text: user agents' device and
 * browser names, referer hosts and tags come from anyone. */
void
render_csv_field(FILE *f, const char *s)
{
	size_t n, lead;
	int formula;

	if (s == NULL)
		return;
	n = strlen(s);
	lead = strspn(s, " ");
	formula = lead < n && strchr("=+-@\t\r", s[lead]) != NULL;
	if (strpbrk(s, ",\"\r\n") == NULL && (n == 0 || (s[0] != ' ' && s[n - 1] != ' '))) {
		if (formula)
			fputc('\'', f);
		fputs(s, f);
		return;
	}
	fputc('"', f);
	if (formula)
		fputc('\'', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* A count field: integers as digits, anything else (null, absent) empty. */
static void
count_field(FILE *f, const json_t *v)
{
	if (json_is_integer(v))
		fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
}

static void
row(FILE *f, const char *code, const char *section, const char *dim, const char *value,
    const json_t *obj)
{
	render_csv_field(f, code);
	fputc(',', f);
	render_csv_field(f, section);
	fputc(',', f);
	render_csv_field(f, dim);
	fputc(',', f);
	render_csv_field(f, value);
	fputc(',', f);
	count_field(f, json_object_get(obj, "visits"));
	fputc(',', f);
	count_field(f, json_object_get(obj, "uniques"));
	fputc(',', f);
	count_field(f, json_object_get(obj, "bot_visits"));
	fputs("\r\n", f);
}

static void
series(FILE *f, const char *code, const json_t *rep, const char *section, const char *key)
{
	size_t i;
	const json_t *o;

	json_array_foreach(json_object_get(rep, section), i, o)
		row(f, code, section, key, json_string_value(json_object_get(o, key)), o);
}

int
render_csv(const json_t *rep, FILE *f, char *errstr, size_t errstr_size)
{
	const json_t *link = json_object_get(rep, "link"), *range = json_object_get(rep, "range");
	const json_t *totals = json_object_get(rep, "totals"), *v;
	const char *code = json_string_value(json_object_get(link, "code"));
	static const char *const link_keys[] = { "code", "short_url", "long_url", "created_at" };
	json_t *all;
	size_t i;

	fputs("code,section,dimension,value,visits,uniques,bot_visits\r\n", f);
	if (link != NULL) {
		for (i = 0; i < sizeof(link_keys) / sizeof(*link_keys); i++)
			row(f, code, "link", link_keys[i],
			    json_string_value(json_object_get(link, link_keys[i])), NULL);
		json_array_foreach(json_object_get(link, "tags"), i, v)
			row(f, code, "link", "tag", json_string_value(v), NULL);
		row(f, code, "link", "deleted",
		    json_is_true(json_object_get(link, "deleted")) ? "true" : "false", NULL);
	} else {
		row(f, code, "tag", "tag", json_string_value(json_object_get(rep, "tag")), NULL);
		json_array_foreach(json_object_get(rep, "links"), i, v)
			row(f, code, "tag", "code", json_string_value(v), NULL);
	}
	row(f, code, "range", "from", json_string_value(json_object_get(range, "from")), NULL);
	row(f, code, "range", "to", json_string_value(json_object_get(range, "to")), NULL);
	row(f, code, "range", "tz", json_string_value(json_object_get(range, "tz")), NULL);
	row(f, code, "range", "exclude_bots",
	    json_is_true(json_object_get(range, "exclude_bots")) ? "true" : "false", NULL);
	row(f, code, "totals", "", "", totals);
	row(f, code, "totals", "first_visit",
	    json_string_value(json_object_get(totals, "first_visit")), NULL);
	row(f, code, "totals", "last_visit",
	    json_string_value(json_object_get(totals, "last_visit")), NULL);
	all = json_pack("{s:O, s:O}", "visits", json_object_get(rep, "all_time_visits"),
	    "bot_visits", json_object_get(rep, "all_time_bot_visits"));
	row(f, code, "all_time", "", "", all);
	json_decref(all);
	series(f, code, rep, "daily", "date");
	series(f, code, rep, "hourly", "hour");
	for (int d = 0; d < MODEL_NDIMS; d++)
		json_array_foreach(json_object_get(json_object_get(rep, "top"), model_dims[d]), i, v)
			row(f, code, "top", model_dims[d], json_string_value(json_object_get(v, "value")), v);
	if (ferror(f)) {
		errstr_set(errstr, errstr_size, "cannot write CSV");
		return -1;
	}
	return 0;
}
