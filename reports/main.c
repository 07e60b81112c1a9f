/* reports - per-link JSON, CSV and HTML summaries from PostgreSQL's rollups:
 * one link (--link), every link of a tag plus a combined summary (--tag), or
 * every link with visits (--all) with an index.json. */
#include "arena.h"
#include "config.h"
#include "errstr.h"
#include "log.h"
#include "model.h"
#include "query.h"
#include "render_csv.h"
#include "render_html.h"
#include "render_json.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Exit codes (also in --help and README). */
#define EXIT_RUNTIME 1  /* database or output failure */
#define EXIT_USAGE 2    /* bad argument, date, zone or setting */
#define EXIT_NOTFOUND 3 /* unknown code, tag without links */

struct reports_conf {
	char *pg_dsn;
	char *base_url;
	char *tz;
	char *format;
	long long top_n;
	long long batch_links;
	long long json_indent;
	char *log_level;
	char *log_format;
};

#define OFF(f) offsetof(struct reports_conf, f)
static const struct cfg_opt reports_tab[] = {
	{ "pg_dsn", CFG_STR, "dbname=linkpulse", 0, 0, NULL, OFF(pg_dsn), 0, "PostgreSQL connection string (libpq)" },
	{ "base_url", CFG_STR, "", 0, 0, NULL, OFF(base_url), 0,
	  "base of short_url in reports ({base_url}/{code}); empty = the short_url stored with the link" },
	{ "tz", CFG_STR, "UTC", 0, 0, NULL, OFF(tz), 0, "default time zone of days and hours (IANA name; --tz overrides)" },
	{ "format", CFG_ENUM, "json", 0, 0, "json|csv|html", OFF(format), 0, "default output format (--format overrides)" },
	{ "top_n", CFG_INT, "10", 1, 1000, NULL, OFF(top_n), 0, "entries per breakdown (--top overrides)" },
	{ "batch_links", CFG_INT, "500", 1, 100000, NULL, OFF(batch_links), 0,
	  "links read per query round by --all and --tag" },
	{ "json_indent", CFG_INT, "-1", -1, 8, NULL, OFF(json_indent), 0,
	  "JSON indentation in spaces: 0 = compact, -1 = 2 on a terminal and compact otherwise" },
	{ "log_level", CFG_ENUM, "warn", 0, 0, "debug|info|warn|error", OFF(log_level), 0, "log level" },
	{ "log_format", CFG_ENUM, "logfmt", 0, 0, "logfmt|json", OFF(log_format), 0, "log line format" },
	CFG_END
};

static const struct cfg_prog reports_prog = {
	"reports", "linkpulse reports: per-link JSON, CSV and HTML summaries.", "LINKPULSE_",
	reports_tab, sizeof(struct reports_conf)
};

static const char USAGE[] =
    "usage: reports --link CODE | --tag TAG | --all --out DIR   [options]\n"
    "\n"
    "  --link CODE        report one link (to stdout, or DIR/link-CODE.EXT with --out DIR)\n"
    "  --tag TAG          every link tagged TAG plus one combined summary: with --out DIR\n"
    "                     DIR/link-CODE.EXT each, DIR/combined.EXT and DIR/index.json;\n"
    "                     to stdout only the combined summary\n"
    "  --all              every link with visits in the range: DIR/link-CODE.EXT each and\n"
    "                     DIR/index.json listing them with their totals (needs --out DIR)\n"
    "  --include-empty    with --all: links without visits in the range too\n"
    "  --from DATE        first day, YYYY-MM-DD (default: --to minus 29 days)\n"
    "  --to DATE          last day, YYYY-MM-DD, inclusive (default: today in --tz)\n"
    "  --tz ZONE          time zone of days and hours, an IANA name (default: setting tz)\n"
    "  --format FMT       json (default), csv or html\n"
    "  --out DIR|-        output directory (created if missing), or - for stdout (default)\n"
    "  --exclude-bots     leave bot visits out entirely (by default they are counted\n"
    "                     separately as bot_visits and kept out of the human figures)\n"
    "  --top N            entries per breakdown (default: setting top_n)\n"
    "\n"
    "Reports contain the link, the range, totals (visits, unique visitors, bot visits, first\n"
    "and last visit), visits and uniques per day (per hour too for 7 days or less), the\n"
    "top-N countries, provinces, cities, ISPs, browsers, browser versions, OSes, device\n"
    "types, referer hosts and languages, and the all-time visit count.\n"
    "Exit status: 0 done, 1 database or output error, 2 bad argument (date, zone, ...),\n"
    "3 unknown code or a tag without links.\n"
    "\n";

struct args {
	const char *link, *tag, *from, *to, *tz, *format, *out, *top;
	int all, include_empty, exclude_bots;
	char **cfg_argv;
	int cfg_argc;
};

static int
valid_date(const char *s)
{
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int y, m, d;

	if (strlen(s) != 10 || s[4] != '-' || s[7] != '-')
		return 0;
	for (int i = 0; i < 10; i++)
		if (i != 4 && i != 7 && (s[i] < '0' || s[i] > '9'))
			return 0;
	y = atoi(s);
	m = atoi(s + 5);
	d = atoi(s + 8);
	if (y < 1970 || y > 9999 || m < 1 || m > 12 || d < 1 || d > mdays[m - 1])
		return 0;
	if (m == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
		return 0;
	return 1;
}

/* Splits argv into report flags and the configuration arguments. */
static int
parse_args(int argc, char **argv, struct args *a, char *err, size_t errsz)
{
	static const struct { const char *name; size_t off; } valued[] = {
		{ "--link", offsetof(struct args, link) }, { "--tag", offsetof(struct args, tag) },
		{ "--from", offsetof(struct args, from) }, { "--to", offsetof(struct args, to) },
		{ "--tz", offsetof(struct args, tz) }, { "--format", offsetof(struct args, format) },
		{ "--out", offsetof(struct args, out) }, { "--top", offsetof(struct args, top) },
	};

	memset(a, 0, sizeof(*a));
	if ((a->cfg_argv = calloc((size_t)argc + 1, sizeof(char *))) == NULL) {
		errstr_set(err, errsz, "out of memory");
		return -1;
	}
	a->cfg_argv[a->cfg_argc++] = argv[0];
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		size_t k, n = sizeof(valued) / sizeof(*valued);

		if (strcmp(arg, "--all") == 0) {
			a->all = 1;
			continue;
		}
		if (strcmp(arg, "--include-empty") == 0) {
			a->include_empty = 1;
			continue;
		}
		if (strcmp(arg, "--exclude-bots") == 0) {
			a->exclude_bots = 1;
			continue;
		}
		for (k = 0; k < n; k++) {
			size_t len = strlen(valued[k].name);
			const char **slot = (const char **)((char *)a + valued[k].off);

			if (strncmp(arg, valued[k].name, len) != 0 || (arg[len] != '\0' && arg[len] != '='))
				continue;
			if (arg[len] == '=') {
				*slot = arg + len + 1;
			} else if (i + 1 < argc) {
				*slot = argv[++i];
			} else {
				errstr_set(err, errsz, "%s needs a value (see --help)", arg);
				return -1;
			}
			break;
		}
		if (k < n)
			continue;
		a->cfg_argv[a->cfg_argc++] = argv[i];
		if ((strcmp(arg, "-c") == 0 || strcmp(arg, "-o") == 0 || strcmp(arg, "--config") == 0 ||
		    strcmp(arg, "--set") == 0) && i + 1 < argc)
			a->cfg_argv[a->cfg_argc++] = argv[++i];
	}
	return 0;
}

static int
check_args(struct args *a, const struct reports_conf *conf, char *err, size_t errsz)
{
	int modes = (a->link != NULL) + (a->tag != NULL) + a->all;
	char *end;

	if (!a->tz)
		a->tz = conf->tz;
	if (!a->format)
		a->format = conf->format;
	if (modes != 1) {
		errstr_set(err, errsz, "give exactly one of --link CODE, --tag TAG or --all (see --help)");
		return -1;
	}
	if (a->link != NULL && (*a->link == '\0' || strlen(a->link) > 64)) {
		errstr_set(err, errsz, "--link: a code is 1-64 characters");
		return -1;
	}
	/* PostgreSQL would refuse them as a database error (exit 1) */
	{
		const struct { const char *flag, *value; } text[] = {
			{ "link", a->link }, { "tag", a->tag }, { "tz", a->tz } };

		for (size_t i = 0; i < sizeof(text) / sizeof(text[0]); i++)
			if (text[i].value != NULL && !errstr_utf8_valid(text[i].value)) {
				errstr_set(err, errsz, "--%s: not valid UTF-8", text[i].flag);
				return -1;
			}
	}
	if (a->from != NULL && !valid_date(a->from)) {
		errstr_set(err, errsz, "--from \"%s\": not a date (YYYY-MM-DD)", a->from);
		return -1;
	}
	if (a->to != NULL && !valid_date(a->to)) {
		errstr_set(err, errsz, "--to \"%s\": not a date (YYYY-MM-DD)", a->to);
		return -1;
	}
	if (*a->tz == '\0') {
		errstr_set(err, errsz, "--tz: empty time zone");
		return -1;
	}
	if (strcmp(a->format, "json") != 0 && strcmp(a->format, "csv") != 0 &&
	    strcmp(a->format, "html") != 0) {
		errstr_set(err, errsz, "--format \"%s\": one of json, csv, html", a->format);
		return -1;
	}
	if (a->top != NULL) {
		long long v;

		errno = 0;
		v = strtoll(a->top, &end, 10);
		if (errno || end == a->top || *end || v < 1 || v > 1000) {
			errstr_set(err, errsz, "--top \"%s\": a number from 1 to 1000", a->top);
			return -1;
		}
	}
	if (!a->out)
		a->out = "-";
	if (a->all && strcmp(a->out, "-") == 0) {
		errstr_set(err, errsz, "--all writes one file per link: give --out DIR");
		return -1;
	}
	if (a->include_empty && !a->all) {
		errstr_set(err, errsz, "--include-empty goes with --all");
		return -1;
	}
	return 0;
}

/* One run at a time per --out directory: two (a --link beside the timer's
 * --all) wrote the same .NAME.tmp, one truncating the file the other had
 * just put in place, and the later swap could put the older report back.
 * dir/.reports.lock is held with flock until the process exits (the
 * descriptor is never closed); another run waits up to 60 s for it. */
static int
lock_dir(const char *dir, char *err, size_t errsz)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/.reports.lock", dir);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		errstr_set(err, errsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	for (int waited_ms = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; waited_ms += 100) {
		struct timespec ts = { 0, 100 * 1000000L };

		if (errno != EWOULDBLOCK && errno != EINTR) {
			errstr_set(err, errsz, "%s: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		if (waited_ms >= 60000) {
			errstr_set(err, errsz, "--out %s: another reports run has been writing there "
			    "for over 60 s (%s is locked)", dir, path);
			close(fd);
			return -1;
		}
		nanosleep(&ts, NULL);
	}
	return 0; /* fd stays open: the lock lasts as long as the process */
}

/* Creates dir if missing, proves a file can be written in it and takes its
 * lock (lock_dir). */
static int
writable_dir(const char *dir, char *err, size_t errsz)
{
	char probe[4096];
	struct stat st;
	int fd;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		errstr_set(err, errsz, "--out %s: cannot create directory: %s", dir, strerror(errno));
		return -1;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		errstr_set(err, errsz, "--out %s: not a directory", dir);
		return -1;
	}
	snprintf(probe, sizeof(probe), "%s/.reports-probe-XXXXXX", dir);
	if ((fd = mkstemp(probe)) < 0) {
		errstr_set(err, errsz, "--out %s: directory not writable: %s", dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(probe);
	return lock_dir(dir, err, errsz);
}

static int json_indent;  /* from the json_indent setting */

static int
render(const json_t *rep, const char *format, FILE *f, char *err, size_t errsz)
{
	if (strcmp(format, "csv") == 0)
		return render_csv(rep, f, err, errsz);
	if (strcmp(format, "html") == 0)
		return render_html(rep, f, err, errsz);
	return render_json(rep, f, json_indent < 0 ? (isatty(fileno(f)) ? 2 : 0) : json_indent,
	    err, errsz);
}

/* A buffer for the text of the file being rendered, reused from file to
 * file; one per rendering thread. buf is owned (free it at the end). */
struct writer {
	char *buf;
	size_t cap;
};

/* Renders doc as format into wr->buf (*len bytes): JSON straight from
 * jansson, CSV and HTML through a memory stream. 0, or -1 with err. */
static int
render_mem(struct writer *wr, const json_t *doc, const char *format, size_t *len, char *err,
           size_t errsz)
{
	char *text = NULL;
	size_t size = 0;
	FILE *f;
	int rc;

	if (strcmp(format, "json") == 0)
		return render_json_mem(doc, json_indent > 0 ? json_indent : 0, &wr->buf, &wr->cap, len,
		    err, errsz);
	if ((f = open_memstream(&text, &size)) == NULL) {
		errstr_set(err, errsz, "out of memory");
		return -1;
	}
	rc = render(doc, format, f, err, errsz);
	if (fclose(f) != 0 && rc == 0) {
		errstr_set(err, errsz, "out of memory");
		rc = -1;
	}
	if (rc == 0 && size > wr->cap) {
		char *nb = realloc(wr->buf, size);

		if (nb == NULL) {
			errstr_set(err, errsz, "out of memory");
			rc = -1;
		} else {
			wr->buf = nb;
			wr->cap = size;
		}
	}
	if (rc == 0) {
		memcpy(wr->buf, text, size);
		*len = size;
	}
	free(text);
	return rc;
}

/* Puts the written tmp in place of path. When path is a regular file already
 * (a refresh), the two are swapped atomically (renameat2 RENAME_EXCHANGE) and
 * tmp, now the previous report, stays for the next run to write over: a
 * refresh then neither allocates nor frees an inode (ext4 without a journal
 * skips, rescanning them on every allocation, the inodes freed in the last
 * minute, six while their table block is unwritten: replacing 10,000 files
 * by rename cost seconds of system time) and never truncates a
 * file to zero (ext4 then writes it back synchronously at close). Otherwise,
 * or where the file system cannot swap, a rename. Returns 0 or -1 (errno). */
static int
put_in_place(const char *tmp, const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0)
			return 0;
		if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
			return -1;
	}
	return rename(tmp, path);
}

/* Writes text to dir/name atomically; no fsync: a report can be written
 * again. With reuse (the link files of --all and --tag), one write(2) over
 * the hidden .name.tmp (the previous report a refresh left, or a new file),
 * cut to the new length, then put_in_place: a reader still holding the file
 * a run before the last put in place can see it change (the timer's hourly
 * --all). Without (--link, combined, index.json: read on every dashboard
 * view, and runs may come seconds apart), a new .name.tmp renamed over
 * name, so that an open report never changes. */
static int
write_text(const char *dir, const char *name, const char *text, size_t len, int reuse,
           char *err, size_t errsz)
{
	char path[4096], tmp[4200];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	if (!reuse && unlink(tmp) < 0 && errno != ENOENT) {
		errstr_set(err, errsz, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC | (reuse ? 0 : O_EXCL), 0644)) < 0) {
		errstr_set(err, errsz, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)len) < 0) { /* len > 0: see put_in_place */
		errstr_set(err, errsz, "%s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	while (len > 0) {
		ssize_t w = write(fd, text, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			errstr_set(err, errsz, "%s: %s", tmp, w < 0 ? strerror(errno) : "short write");
			rc = -1;
			break;
		}
		text += w;
		len -= (size_t)w;
	}
	if (close(fd) != 0 && rc == 0) {
		errstr_set(err, errsz, "%s: %s", tmp, strerror(errno));
		rc = -1;
	}
	if (rc == 0 && (reuse ? put_in_place(tmp, path) : rename(tmp, path)) < 0) {
		errstr_set(err, errsz, "%s: %s", path, strerror(errno));
		rc = -1;
	}
	if (rc < 0)
		unlink(tmp);
	return rc;
}

static int
write_file(struct writer *wr, const char *dir, const char *name, const json_t *doc,
           const char *format, char *err, size_t errsz)
{
	size_t len;

	if (render_mem(wr, doc, format, &len, err, errsz) < 0)
		return -1;
	return write_text(dir, name, wr->buf, len, 0, err, errsz);
}

static int
has_visits(const json_t *rep, int exclude_bots)
{
	return model_total(rep, "visits") > 0 || (!exclude_bots && model_total(rep, "bot_visits") > 0);
}

#define NAME_LEN 96   /* "link-" + code (at most 64) + ".html" + NUL */

/* One round of --all/--tag: a thread of its own reads the reports of
 * ids[0..m) from PostgreSQL and renders them, while the main thread writes
 * the previous round's files. Rendering used to be the main thread's: with
 * the writes it made that thread the run's longest (perf: 5.8 of 6.6 s)
 * while the two readers left the cores partly idle. */
struct round {
	struct query *q;
	const struct args *a;
	const long long *ids;
	size_t m;
	json_t **reps;        /* owned: cap slots, filled by the round's thread; the
	                       * reports the main thread has written are released
	                       * by the next thread of this round (off the main
	                       * thread, which writes the files) */
	size_t cap;
	struct writer wr;     /* the round thread's rendering buffer */
	char *text;           /* owned: the rendered files of the round, one after another */
	size_t text_len, text_cap;
	size_t *off, *len;    /* owned: cap slots; report i's file is text[off[i]..+len[i]),
	                       * len[i] NO_FILE when it gets none */
	char name[NAME_LEN];
	json_t *index;        /* owned: { "links": [index entries of the files, in order] } */
	struct arena *arena;  /* owned, or NULL (malloc): where the round thread's jansson
	                       * values come from; reset when the next thread of this
	                       * round has released the reports */
	int rc;
	char err[1024];
	pthread_t thread;
	int started;
};

#define NO_FILE ((size_t)-1)

/* Address space reserved per round for its jansson values: the bench's
 * rounds of 500 links of 90 days, visits on most days, used 34 MB (debug log),
 * so 1 GB holds ~14,000 such links; past it a round falls back to malloc.
 * Only the pages used are touched. */
#define ROUND_ARENA_BYTES ((size_t)1 << 30)

/* Renders report i of r into r->text when it gets a file (round thread);
 * 0, or -1 with err. */
static int
round_render(struct round *r, size_t i, char *err, size_t errsz)
{
	const struct args *a = r->a;
	size_t len;

	r->len[i] = NO_FILE;
	if (r->reps[i] == NULL || !(a->include_empty || a->tag || has_visits(r->reps[i], a->exclude_bots)))
		return 0;
	if (render_mem(&r->wr, r->reps[i], a->format, &len, err, errsz) < 0)
		return -1;
	if (r->text_len + len > r->text_cap) {
		size_t ncap = (r->text_len + len) * 2;
		char *nt = realloc(r->text, ncap);

		if (nt == NULL) {
			errstr_set(err, errsz, "out of memory");
			return -1;
		}
		r->text = nt;
		r->text_cap = ncap;
	}
	memcpy(r->text + r->text_len, r->wr.buf, len);
	r->off[i] = r->text_len;
	r->len[i] = len;
	r->text_len += len;
	return 0;
}

/* Writes the file of report i of r, rendered by round_render, adding its
 * index entry (main thread); 1 written, 0 no file, -1 with err. */
static int
round_write(struct round *r, size_t i, char *err, size_t errsz)
{
	const struct args *a = r->a;
	const char *code;

	if (r->len[i] == NO_FILE)
		return 0;
	code = json_string_value(json_object_get(json_object_get(r->reps[i], "link"), "code"));
	snprintf(r->name, sizeof(r->name), "link-%s.%s", code, a->format);
	if (write_text(a->out, r->name, r->text + r->off[i], r->len[i], 1, err, errsz) < 0)
		return -1;
	model_index_add(r->index, r->reps[i], r->name);
	return 1;
}

/* Reads and renders the round's reports (round thread); 0, or -1 with r->err. */
static int
round_fill(struct round *r)
{
	if (query_reports(r->q, r->ids, r->m, r->reps, r->err, sizeof(r->err)) < 0)
		return -1;
	r->text_len = 0;
	for (size_t i = 0; i < r->m; i++)
		if (round_render(r, i, r->err, sizeof(r->err)) < 0)
			return -1;
	return 0;
}

static void *
round_run(void *arg)
{
	struct round *r = arg;

	for (size_t i = 0; i < r->cap; i++) {
		json_decref(r->reps[i]);
		r->reps[i] = NULL;
	}
	if (r->arena != NULL)
		arena_reset(r->arena);
	if ((r->index = json_pack("{s:[]}", "links")) == NULL) {  /* outlives the round: malloc */
		errstr_set(r->err, sizeof(r->err), "out of memory");
		return NULL;
	}
	arena_enter(r->arena);
	if (round_fill(r) == 0)
		r->rc = 0;
	arena_enter(NULL);
	if (r->arena != NULL)
		log_debug("round of %zu links: %zu bytes of arena", r->m, arena_used(r->arena));
	return NULL;
}

static int
round_start(struct round *r, size_t m, char *err, size_t errsz)
{
	int e;

	r->m = m;
	r->rc = -1;
	r->err[0] = '\0';
	json_decref(r->index);
	r->index = NULL;
	if ((e = pthread_create(&r->thread, NULL, round_run, r)) != 0) {
		errstr_set(err, errsz, "cannot start a thread: %s", strerror(e));
		return -1;
	}
	r->started = 1;
	return 0;
}

/* Waits for r; 0 with its files rendered, or -1 with err. */
static int
round_wait(struct round *r, char *err, size_t errsz)
{
	if (!r->started)
		return 0;
	pthread_join(r->thread, NULL);
	r->started = 0;
	if (r->rc < 0) {
		errstr_set(err, errsz, "%s", r->err);
		return -1;
	}
	return 0;
}

/* Per-link files for ids, in rounds of batch links; adds each to index in
 * order. With q2 (a second query on a connection of its own) two rounds are
 * read at once, on q and q2 in turn, while the main thread renders and
 * writes the one before them: reading a round is the longest stage and
 * leaves the cores partly idle on its own. Without q2, one round at a time. */
static int
write_links(struct query *q, struct query *q2, const struct args *a, const long long *ids,
            size_t n, size_t batch, json_t *index, char *err, size_t errsz)
{
	struct query *qs[2] = { q, q2 != NULL ? q2 : q };
	size_t depth = q2 != NULL ? 2 : 1, nr = depth + 1, k, written = 0;
	struct round rounds[3];
	int progress = a->all && isatty(STDERR_FILENO), rc = 0;
	char aerr[256];

	memset(rounds, 0, sizeof(rounds));
	for (k = 0; k < nr; k++) {
		rounds[k].a = a;
		rounds[k].cap = batch;
		if ((rounds[k].reps = calloc(batch, sizeof(json_t *))) == NULL ||
		    (rounds[k].off = calloc(batch, sizeof(size_t))) == NULL ||
		    (rounds[k].len = calloc(batch, sizeof(size_t))) == NULL) {
			errstr_set(err, errsz, "out of memory");
			rc = -1;
		}
		/* without one (address space refused), the round uses malloc */
		if (rc == 0 && (rounds[k].arena = arena_new(ROUND_ARENA_BYTES, aerr, sizeof(aerr))) == NULL)
			log_warnx("%s; reading with malloc", aerr);
	}
	for (k = 0; rc == 0 && k < depth && k * batch < n; k++) {
		rounds[k].q = qs[k % depth];
		rounds[k].ids = ids + k * batch;
		if (round_start(&rounds[k], n - k * batch < batch ? n - k * batch : batch, err, errsz) < 0)
			rc = -1;
	}
	for (k = 0; rc == 0 && k * batch < n; k++) {
		struct round *r = &rounds[k % nr], *nx = &rounds[(k + depth) % nr];
		size_t at = k * batch, next = (k + depth) * batch;

		if (round_wait(r, err, errsz) < 0) {
			rc = -1;
			break;
		}
		if (next < n) {
			nx->q = qs[k % depth];  /* round k + depth: the same query as round k */
			nx->ids = ids + next;
			if (round_start(nx, n - next < batch ? n - next : batch, err, errsz) < 0)
				rc = -1;
		}
		for (size_t i = 0; i < r->m; i++) {
			int w = rc == 0 ? round_write(r, i, err, errsz) : 0;

			if (w < 0)
				rc = -1;
			written += w > 0;
		}
		if (rc == 0)
			json_array_extend(json_object_get(index, "links"), json_object_get(r->index, "links"));
		if (progress)
			fprintf(stderr, "\rreports: %zu/%zu links read, %zu files written", at + r->m, n,
			    written);
	}
	if (progress)
		fputc('\n', stderr);
	/* Rounds still running after a failure: all waited for before any
	 * arena goes (jansson's frees in a running round look every arena
	 * up, arena_owns, the freed one too). */
	for (k = 0; k < nr; k++)
		round_wait(&rounds[k], NULL, 0);
	for (k = 0; k < nr; k++) {
		json_decref(rounds[k].index);
		for (size_t i = 0; rounds[k].reps != NULL && i < batch; i++)
			json_decref(rounds[k].reps[i]);
		arena_free(rounds[k].arena);
		free(rounds[k].reps);
		free(rounds[k].off);
		free(rounds[k].len);
		free(rounds[k].text);
		free(rounds[k].wr.buf);
	}
	return rc;
}

static int
run(const struct args *a, const struct reports_conf *conf)
{
	char err[1024], name[NAME_LEN];
	struct query *q, *q2 = NULL;
	long long *ids = NULL, id;
	size_t n = 0;
	json_t *rep = NULL, *index = NULL;
	int bad = 0, rc = EXIT_RUNTIME, found;
	long long top = a->top ? strtoll(a->top, NULL, 10) : conf->top_n;
	struct writer main_writer = { NULL, 0 };

	if (strcmp(a->out, "-") != 0 && writable_dir(a->out, err, sizeof(err)) < 0) {
		fprintf(stderr, "reports: %s\n", err);
		return EXIT_RUNTIME;
	}
	if ((q = query_open(conf->pg_dsn, a->tz, a->from, a->to, a->exclude_bots, top, conf->base_url,
	    &bad, err, sizeof(err))) == NULL) {
		fprintf(stderr, "reports: %s\n", err);
		return bad ? EXIT_USAGE : EXIT_RUNTIME;
	}
	if (a->link != NULL) {
		if ((found = query_link_id(q, a->link, &id, err, sizeof(err))) <= 0) {
			if (found == 0)
				errstr_set(err, sizeof(err), "unknown code \"%s\"", a->link);
			rc = found == 0 ? EXIT_NOTFOUND : EXIT_RUNTIME;
			goto fail;
		}
		if (query_reports(q, &id, 1, &rep, err, sizeof(err)) < 0)
			goto fail;
		if (rep == NULL) { /* its row went between the two statements */
			errstr_set(err, sizeof(err), "unknown code \"%s\"", a->link);
			rc = EXIT_NOTFOUND;
			goto fail;
		}
		snprintf(name, sizeof(name), "link-%s.%s", a->link, a->format);
		if (strcmp(a->out, "-") == 0 ? render(rep, a->format, stdout, err, sizeof(err)) < 0 ||
		    fflush(stdout) != 0 : write_file(&main_writer, a->out, name, rep, a->format, err, sizeof(err)) < 0)
			goto fail;
		rc = 0;
		goto done;
	}
	if (query_link_ids(q, a->tag, a->include_empty, &ids, &n, err, sizeof(err)) < 0)
		goto fail;
	if (a->tag != NULL && n == 0) {
		errstr_set(err, sizeof(err), "no link has the tag \"%s\"", a->tag);
		rc = EXIT_NOTFOUND;
		goto fail;
	}
	if (a->tag != NULL) {
		if ((rep = query_combined(q, a->tag, ids, n, err, sizeof(err))) == NULL)
			goto fail;
		if (strcmp(a->out, "-") == 0) {
			if (render(rep, a->format, stdout, err, sizeof(err)) < 0 || fflush(stdout) != 0)
				goto fail;
			rc = 0;
			goto done;
		}
	}
	index = model_index_new(query_range(q));
	/* More than one round: a second query reads every other round (the
	 * range as q resolved it, so that both agree past midnight). */
	if (n > (size_t)conf->batch_links && (q2 = query_open(conf->pg_dsn, a->tz, query_range(q)->from,
	    query_range(q)->to, a->exclude_bots, top, conf->base_url, &bad, err, sizeof(err))) == NULL)
		goto fail;
	if (write_links(q, q2, a, ids, n, (size_t)conf->batch_links, index, err, sizeof(err)) < 0)
		goto fail;
	if (rep != NULL) {
		snprintf(name, sizeof(name), "combined.%s", a->format);
		if (write_file(&main_writer, a->out, name, rep, a->format, err, sizeof(err)) < 0)
			goto fail;
		model_index_set_combined(index, rep, name);
	}
	if (write_file(&main_writer, a->out, "index.json", index, "json", err, sizeof(err)) < 0)
		goto fail;
	log_info("%zu link files and index.json written to %s",
	    json_array_size(json_object_get(index, "links")), a->out);
	rc = 0;
	goto done;
fail:
	fprintf(stderr, "reports: %s\n", err);
done:
	json_decref(rep);
	json_decref(index);
	free(ids);
	free(main_writer.buf);
	query_close(q2);
	query_close(q);
	return rc;
}

int
main(int argc, char **argv)
{
	struct reports_conf conf;
	struct args a;
	enum cfg_action action;
	char errstr[512];
	int rc;

	arena_install();  /* before any jansson value exists */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(USAGE, stdout);
			cfg_usage(&reports_prog, stdout);
			return 0;
		}
	if (parse_args(argc, argv, &a, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "reports: %s\n", errstr);
		free(a.cfg_argv);
		return EXIT_USAGE;
	}
	if (cfg_from_args(&reports_prog, &conf, a.cfg_argc, a.cfg_argv, &action, NULL, errstr,
	    sizeof(errstr)) < 0) {
		fprintf(stderr, "reports: %s\n", errstr);
		free(a.cfg_argv);
		return EXIT_USAGE;
	}
	if (action == CFG_EXIT_OK) {
		free(a.cfg_argv);
		return 0;
	}
	if (log_init("reports", conf.log_level, conf.log_format, errstr, sizeof(errstr)) < 0 ||
	    check_args(&a, &conf, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "reports: %s\n", errstr);
		cfg_free(&reports_prog, &conf);
		free(a.cfg_argv);
		return EXIT_USAGE;
	}
	json_indent = (int)conf.json_indent;
	/* An --all run allocates and frees millions of small jansson values
	 * across threads: without fastbins no large request has to consolidate
	 * them first, and a padded, rarely trimmed heap spares the page faults
	 * of growing and shrinking it every round (about 10% of the run). */
	mallopt(M_MXFAST, 0);
	mallopt(M_TOP_PAD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	rc = run(&a, &conf);
	cfg_free(&reports_prog, &conf);
	free(a.cfg_argv);
	return rc;
}
