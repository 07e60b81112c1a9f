/* test_report_render - the reports renderers: CSV field quoting and HTML
 * escaping from tests/data/report_render_cases.txt, and one small model
 * rendered as CSV (checked row by row), JSON and HTML. */
#include "../../reports/model.h"
#include "../../reports/render_csv.h"
#include "../../reports/render_html.h"
#include "../../reports/render_json.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static char *
capture(int kind, const char *in)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (kind == 'c')
		render_csv_field(f, in);
	else
		render_html_text(f, in);
	fclose(f);
	return buf;
}

static void
cases(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0;

	CHECK(f != NULL, "cannot open %s", path);
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *kind, *in, *want, *got;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		kind = line;
		if ((in = strchr(kind, '\t')) == NULL || (want = strchr(in + 1, '\t')) == NULL) {
			CHECK(0, "%s: bad line \"%s\"", path, line);
			continue;
		}
		*in++ = '\0';
		*want++ = '\0';
		unit_unescape(in);
		unit_unescape(want);
		got = capture(strcmp(kind, "csv") == 0 ? 'c' : 'h', in);
		CHECK_STR(got, want, kind);
		free(got);
		n++;
	}
	fclose(f);
	CHECK(n >= 15, "only %d cases read", n);
}

static void
model_round(void)
{
	json_t *days = json_pack("[s, s]", "2024-05-01", "2024-05-02");
	json_t *zero = model_zero_series(days, "date", 1);
	struct model_range r = { "2024-05-01", "2024-05-02", "Asia/Shanghai", 0, 10, days, NULL, zero, NULL };
	struct model_link l = { "abc", "http://s.test/abc", "https://e.test/?a=1,2", "2024-04-01T00:00:00+08:00",
	    "[\"spring\", \"say \\\"hi\\\"\"]", 0, 9, 2 };
	json_t *rep = model_new_link(&l, &r);
	char *buf = NULL, *p;
	size_t len = 0;
	FILE *f;
	static const char *const want[] = {
		"code,section,dimension,value,visits,uniques,bot_visits",
		"abc,link,code,abc,,,",
		"abc,link,short_url,http://s.test/abc,,,",
		"abc,link,long_url,\"https://e.test/?a=1,2\",,,",
		"abc,link,created_at,2024-04-01T00:00:00+08:00,,,",
		"abc,link,tag,spring,,,",
		"abc,link,tag,\"say \"\"hi\"\"\",,,",
		"abc,link,deleted,false,,,",
		"abc,range,from,2024-05-01,,,",
		"abc,range,to,2024-05-02,,,",
		"abc,range,tz,Asia/Shanghai,,,",
		"abc,range,exclude_bots,false,,,",
		"abc,totals,,,5,4,2",
		"abc,totals,first_visit,2024-05-01T00:30:00.000000+08:00,,,",
		"abc,totals,last_visit,2024-05-02T20:00:00.000000+08:00,,,",
		"abc,all_time,,,9,,2",
		"abc,daily,date,2024-05-01,2,2,1",
		"abc,daily,date,2024-05-02,3,2,0",
		"abc,top,country,US,2,,1",
		"abc,top,country,,1,,1",
		NULL,
	};
	int i = 0;

	CHECK(rep != NULL, "model_new_link failed");
	if (rep == NULL)
		return;
	CHECK(model_new_link(&(struct model_link){ "x", "y", "z", "t", "not json", 0, 0, 0 }, &r) == NULL,
	    "bad tags accepted");
	model_set_counts(rep, 't', 0, 5, 2, "2024-05-01T00:30:00.000000+08:00",
	    "2024-05-02T20:00:00.000000+08:00");
	model_set_uniques(rep, 't', 0, 4);
	model_set_counts(rep, 'd', 0, 2, 1, NULL, NULL);
	model_set_uniques(rep, 'd', 0, 2);
	model_set_counts(rep, 'd', 1, 3, 0, NULL, NULL);
	model_set_uniques(rep, 'd', 1, 2);
	model_set_counts(rep, 'd', 7, 99, 0, NULL, NULL);  /* out of range: ignored */
	model_top_add(rep, "country", "US", 2, 1);
	model_top_add(rep, "country", "", 1, 1);
	model_top_add(rep, "no_such_dim", "x", 1, 1);
	CHECK(model_total(rep, "visits") == 5, "total visits %lld", model_total(rep, "visits"));

	f = open_memstream(&buf, &len);
	CHECK(render_csv(rep, f, NULL, 0) == 0, "render_csv failed");
	fclose(f);
	for (p = buf; *p && want[i] != NULL; i++) {
		char *eol = strstr(p, "\r\n");

		CHECK(eol != NULL, "row %d: no CRLF", i);
		if (eol == NULL)
			break;
		*eol = '\0';
		CHECK_STR(p, want[i], "csv row");
		p = eol + 2;
	}
	CHECK(want[i] == NULL && *p == '\0', "row count differs at %d (rest \"%s\")", i, p);
	free(buf);

	buf = NULL;
	f = open_memstream(&buf, &len);
	CHECK(render_json(rep, f, 0, NULL, 0) == 0, "render_json failed");
	fclose(f);
	{
		json_t *back = json_loads(buf, 0, NULL);

		CHECK(back != NULL && json_equal(back, rep), "JSON does not load back equal");
		CHECK(strchr(buf, '\n') == buf + strlen(buf) - 1, "compact JSON is one line");
		json_decref(back);
	}
	free(buf);

	buf = NULL;
	f = open_memstream(&buf, &len);
	CHECK(render_html(rep, f, NULL, 0) == 0, "render_html failed");
	fclose(f);
	CHECK(strstr(buf, "<svg") != NULL && strstr(buf, "<polyline") != NULL, "no SVG chart");
	CHECK(strstr(buf, "name=\"viewport\"") != NULL, "no viewport meta");
	CHECK(strstr(buf, "<script") == NULL, "script in HTML");
	CHECK(strstr(buf, "(unknown)") != NULL, "unknown value not labelled");
	CHECK(strstr(buf, "https://e.test/?a=1,2") != NULL, "long URL missing");
	free(buf);
	json_decref(rep);
	json_decref(zero);
	json_decref(days);
}

int
main(void)
{
	cases("tests/data/report_render_cases.txt");
	model_round();
	return unit_done("test_report_render");
}
