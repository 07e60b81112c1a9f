/* render_html.c - the HTML view: summary cards, SVG line charts (viewBox,
 * scales to any width), CSS bar charts, all text escaped. */
#include "render_html.h"

#include "errstr.h"
#include "model.h"

#include <string.h>

#define CHART_W 800
#define CHART_H 260
#define PAD_L 80
#define PAD_R 16
#define PAD_T 16
#define PAD_B 44

static const char CSS[] =
    "*{box-sizing:border-box}"
    "body{margin:0;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
    "background:#f4f6fa;color:#1c2430;line-height:1.4}"
    "main{max-width:1100px;margin:0 auto;padding:16px}"
    "h1{font-size:1.4rem;margin:0 0 4px;word-break:break-all}"
    "h2{font-size:1.05rem;margin:0 0 8px}"
    ".sub{color:#5a6878;font-size:.9rem;word-break:break-all}"
    ".cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:12px;margin:16px 0}"
    ".card,.panel{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:12px 14px}"
    ".card b{display:block;font-size:1.5rem;color:#1a56db}"
    ".card span{color:#5a6878;font-size:.85rem}"
    ".panel{margin:0 0 16px}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:16px}"
    ".grid .panel{margin:0}"
    "svg{width:100%;height:auto;display:block}"
    ".bar{display:grid;grid-template-columns:minmax(0,1fr) auto;gap:2px 8px;margin:6px 0;font-size:.9rem}"
    ".bar .l{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}"
    ".bar .n{text-align:right;font-variant-numeric:tabular-nums}"
    ".bar .t{grid-column:1/3;background:#e6ecf5;border-radius:4px;height:10px}"
    ".bar .t i{display:block;height:10px;border-radius:4px;background:#1a56db}"
    ".legend{font-size:.85rem;color:#5a6878}"
    ".legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin:0 4px 0 10px}"
    ".empty{color:#8a96a4;font-size:.9rem}"
    "footer{color:#8a96a4;font-size:.8rem;margin:8px 0 24px}";

void
render_html_text(FILE *f, const char *s)
{
	if (s == NULL)
		return;
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(*s, f);
		}
	}
}

static const char *
str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static long long
num(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* Smallest "nice" axis maximum >= v (4 x 1, 2, 5 x 10^k: quarter ticks stay
 * whole numbers). */
static long long
nice_max(long long v)
{
	long long m = 4;

	if (v <= 0)
		return 4;
	for (;;) {
		if (v <= m)
			return m;
		if (v <= 2 * m)
			return 2 * m;
		if (v <= 5 * m)
			return 5 * m;
		m *= 10;
	}
}

/* "YYYY-MM-DD" as is; an RFC 3339 hour as "MM-DD HH:MM". */
static void
axis_label(FILE *f, const char *s)
{
	char buf[16];

	if (s != NULL && strlen(s) >= 16 && s[10] == 'T') {
		snprintf(buf, sizeof(buf), "%.5s %.5s", s + 5, s + 11);
		render_html_text(f, buf);
	} else {
		render_html_text(f, s);
	}
}

static void
polyline(FILE *f, const json_t *pts, const char *key, long long ymax, const char *color,
         const char *dash)
{
	size_t n = json_array_size(pts), i;
	const json_t *o;
	double w = CHART_W - PAD_L - PAD_R, h = CHART_H - PAD_T - PAD_B;

	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" stroke-linejoin=\"round\"%s points=\"",
	    color, dash);
	json_array_foreach(pts, i, o) {
		double x = PAD_L + (n > 1 ? w * (double)i / (double)(n - 1) : w / 2);
		double y = PAD_T + h - h * (double)num(o, key) / (double)ymax;

		fprintf(f, "%s%.1f,%.1f", i ? " " : "", x, y);
	}
	fputs("\"/>\n", f);
}

/* A line chart of visits and uniques over pts (daily or hourly objects). */
static void
line_chart(FILE *f, const json_t *pts, const char *key, const char *title)
{
	size_t n = json_array_size(pts), i;
	const json_t *o;
	long long max = 0, ymax;
	double w = CHART_W - PAD_L - PAD_R, h = CHART_H - PAD_T - PAD_B;

	json_array_foreach(pts, i, o)
		if (num(o, "visits") > max)
			max = num(o, "visits");
	ymax = nice_max(max);
	fputs("<section class=\"panel\"><h2>", f);
	render_html_text(f, title);
	fputs("</h2><div class=\"legend\"><i style=\"background:#1a56db\"></i>visits"
	    "<i style=\"background:#e3a008\"></i>unique visitors</div>\n", f);
	fprintf(f, "<svg viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", CHART_W, CHART_H);
	render_html_text(f, title);
	fputs("\" font-size=\"22\" fill=\"#5a6878\">\n", f);
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", CHART_W, CHART_H);
	for (int g = 0; g <= 4; g++) {
		double y = PAD_T + h - h * g / 4.0;

		fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e6ecf5\"/>"
		    "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%lld</text>\n", PAD_L, CHART_W - PAD_R,
		    y, y, PAD_L - 6, y + 4, ymax * g / 4);
	}
	if (n > 0) {
		size_t marks[3] = { 0, n / 2, n - 1 };

		for (int k = 0; k < 3; k++) {
			double x = PAD_L + (n > 1 ? w * (double)marks[k] / (double)(n - 1) : w / 2);
			const char *anchor = k == 0 ? "start" : k == 1 ? "middle" : "end";

			if ((k > 0 && marks[k] == marks[k - 1]) || (k == 1 && n < 3))
				continue;
			fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">", x, CHART_H - 10, anchor);
			axis_label(f, str(json_array_get(pts, marks[k]), key));
			fputs("</text>\n", f);
		}
	}
	polyline(f, pts, "uniques", ymax, "#e3a008", " stroke-dasharray=\"6 4\"");
	polyline(f, pts, "visits", ymax, "#1a56db", "");
	if (n <= 200)
		json_array_foreach(pts, i, o) {
			double x = PAD_L + (n > 1 ? w * (double)i / (double)(n - 1) : w / 2);
			double y = PAD_T + h - h * (double)num(o, "visits") / (double)ymax;

			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1a56db\"><title>", x, y);
			render_html_text(f, str(o, key));
			fprintf(f, ": %lld visits, %lld unique</title></circle>\n", num(o, "visits"),
			    num(o, "uniques"));
		}
	fputs("</svg></section>\n", f);
}

static void
bars(FILE *f, const char *dim, const json_t *list)
{
	size_t i;
	const json_t *o;
	long long max = 1;

	fputs("<section class=\"panel\"><h2>", f);
	render_html_text(f, dim);
	fputs("</h2>\n", f);
	if (json_array_size(list) == 0)
		fputs("<p class=\"empty\">no visits</p>\n", f);
	json_array_foreach(list, i, o)
		if (num(o, "visits") > max)
			max = num(o, "visits");
	json_array_foreach(list, i, o) {
		const char *v = str(o, "value");

		fputs("<div class=\"bar\"><span class=\"l\">", f);
		render_html_text(f, v ? v : "(unknown)");
		fprintf(f, "</span><span class=\"n\">%lld</span><span class=\"t\"><i style=\"width:%.1f%%\">"
		    "</i></span></div>\n", num(o, "visits"), 100.0 * (double)num(o, "visits") / (double)max);
	}
	fputs("</section>\n", f);
}

static void
card(FILE *f, const char *label, const json_t *v)
{
	fputs("<div class=\"card\"><b>", f);
	if (json_is_integer(v))
		fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		fputs("&ndash;", f);
	fputs("</b><span>", f);
	render_html_text(f, label);
	fputs("</span></div>\n", f);
}

int
render_html(const json_t *rep, FILE *f, char *errstr, size_t errstr_size)
{
	const json_t *link = json_object_get(rep, "link"), *range = json_object_get(rep, "range");
	const json_t *totals = json_object_get(rep, "totals"), *top = json_object_get(rep, "top");
	const char *title = link ? str(link, "short_url") : str(rep, "tag");
	const char *url = link ? str(link, "long_url") : NULL;

	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
	render_html_text(f, link ? "Report " : "Tag report ");
	render_html_text(f, title);
	fprintf(f, "</title>\n<style>%s</style></head>\n<body><main>\n<h1>", CSS);
	if (!link)
		fputs("Tag ", f);
	render_html_text(f, title);
	fputs("</h1>\n<div class=\"sub\">", f);
	if (url != NULL) {
		fputs("&rarr; ", f);
		if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0) {
			fputs("<a href=\"", f);
			render_html_text(f, url);
			fputs("\" rel=\"noopener noreferrer\">", f);
			render_html_text(f, url);
			fputs("</a>", f);
		} else {
			render_html_text(f, url);
		}
		fputs("<br>", f);
	}
	render_html_text(f, str(range, "from"));
	fputs(" &ndash; ", f);
	render_html_text(f, str(range, "to"));
	fputs(" (", f);
	render_html_text(f, str(range, "tz"));
	fputs(")", f);
	if (json_is_true(json_object_get(range, "exclude_bots")))
		fputs(", bots excluded", f);
	fputs("</div>\n<div class=\"cards\">\n", f);
	card(f, "visits", json_object_get(totals, "visits"));
	card(f, "unique visitors", json_object_get(totals, "uniques"));
	card(f, "bot visits", json_object_get(totals, "bot_visits"));
	card(f, "all-time visits", json_object_get(rep, "all_time_visits"));
	fputs("</div>\n", f);
	line_chart(f, json_object_get(rep, "daily"), "date", "Visits per day");
	if (json_object_get(rep, "hourly") != NULL)
		line_chart(f, json_object_get(rep, "hourly"), "hour", "Visits per hour");
	fputs("<div class=\"grid\">\n", f);
	for (int d = 0; d < MODEL_NDIMS; d++)
		bars(f, model_dims[d], json_object_get(top, model_dims[d]));
	fputs("</div>\n<footer>linkpulse &middot; generated ", f);
	render_html_text(f, str(rep, "generated_at"));
	fputs(" &middot; first visit ", f);
	render_html_text(f, str(totals, "first_visit") ? str(totals, "first_visit") : "none");
	fputs(", last visit ", f);
	render_html_text(f, str(totals, "last_visit") ? str(totals, "last_visit") : "none");
	fputs("</footer>\n</main></body></html>\n", f);
	if (ferror(f)) {
		errstr_set(errstr, errstr_size, "cannot write HTML");
		return -1;
	}
	return 0;
}
