/* render_html.h - one self-contained HTML page per report: inline CSS, an
 * inline SVG line chart of visits per day (and per hour for short ranges),
 * bar charts of the top breakdowns; no external scripts, styles or fonts. */
#ifndef LP_REPORTS_RENDER_HTML_H
#define LP_REPORTS_RENDER_HTML_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Writes s HTML-escaped (& < > " ') to f; NULL writes nothing. */
void render_html_text(FILE *f, const char *s);

/* Writes the page for rep (borrowed). 0, or -1 with errstr. */
int render_html(const json_t *rep, FILE *f, char *errstr, size_t errstr_size);

#endif
