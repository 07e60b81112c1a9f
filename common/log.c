/* log.c - leveled logging to stderr, one line per message, logfmt or JSON
 * lines (JSON encoded by jansson). A mutex keeps lines whole across threads. */
#include "log.h"

#include "errstr.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static const char *log_prog = "linkpulse";
/* Set by log_init (again on a reload's thread) while other threads log. */
static _Atomic int log_level = LOG_LVL_INFO;
static _Atomic int log_format = LOG_FMT_LOGFMT;
static pthread_mutex_t log_mtx = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = { "debug", "info", "warn", "error", "fatal" };

int
log_init(const char *progname, const char *level, const char *format,
         char *errstr, size_t errstr_size)
{
	int lvl = atomic_load_explicit(&log_level, memory_order_relaxed);
	int fmt = atomic_load_explicit(&log_format, memory_order_relaxed);

	if (level != NULL) {
		lvl = -1;
		for (int i = 0; i <= LOG_LVL_ERROR; i++)
			if (strcasecmp(level, level_names[i]) == 0)
				lvl = i;
		if (lvl < 0) {
			snprintf(errstr, errstr_size,
			    "unknown log level \"%s\" (debug, info, warn, error)", level);
			return -1;
		}
	}
	if (format != NULL) {
		if (strcasecmp(format, "logfmt") == 0)
			fmt = LOG_FMT_LOGFMT;
		else if (strcasecmp(format, "json") == 0)
			fmt = LOG_FMT_JSON;
		else {
			snprintf(errstr, errstr_size,
			    "unknown log format \"%s\" (logfmt, json)", format);
			return -1;
		}
	}
	if (progname != NULL)
		log_prog = progname;
	atomic_store_explicit(&log_level, lvl, memory_order_relaxed);
	atomic_store_explicit(&log_format, fmt, memory_order_relaxed);
	return 0;
}

int
log_enabled(enum log_level lvl)
{
	return (int)lvl >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

/* Writes s as a logfmt value: bare when safe, else quoted with escapes. */
static void
logfmt_value(FILE *f, const char *s)
{
	int bare = *s != '\0';

	for (const char *p = s; *p && bare; p++)
		if (*p == ' ' || *p == '"' || *p == '=' || (unsigned char)*p < 0x20)
			bare = 0;
	if (bare) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p < 0x20)
			fprintf(f, "\\x%02x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void
vlog(int lvl, const char *errmsg, const char *fmt, va_list ap)
{
	char msg[4096], ts[40];
	struct timeval tv;
	struct tm tm;
	size_t n;

	if (lvl < atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (errmsg != NULL) {
		n = strlen(msg);
		snprintf(msg + n, sizeof(msg) - n, ": %s", errmsg);
	}
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(tv.tv_usec / 1000));

	pthread_mutex_lock(&log_mtx);
	if (atomic_load_explicit(&log_format, memory_order_relaxed) == LOG_FMT_JSON) {
		json_t *o;
		char *line;

		/* jansson refuses a string that is not UTF-8 (a decoded request
		 * path, a server message cut inside a character): the line would
		 * be lost. Bad bytes become '?' instead. */
		errstr_utf8_clean(msg);
		o = json_pack("{s:s, s:s, s:s, s:s}", "ts", ts,
		    "level", level_names[lvl], "prog", log_prog, "msg", msg);
		line = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;

		if (line != NULL) {
			json_free_t jfree;

			fprintf(stderr, "%s\n", line);
			/* jansson's own free: a program may give jansson an allocator (reports) */
			json_get_alloc_funcs(NULL, &jfree);
			jfree(line);
		}
		json_decref(o);
	} else {
		fprintf(stderr, "ts=%s level=%s prog=%s msg=", ts, level_names[lvl], log_prog);
		logfmt_value(stderr, msg);
		fputc('\n', stderr);
	}
	fflush(stderr);
	pthread_mutex_unlock(&log_mtx);
}

#define LOG_FN(name, lvl, witherr)                                      \
	void name(const char *fmt, ...)                                 \
	{                                                               \
		va_list ap;                                             \
		const char *e = (witherr) ? strerror(errno) : NULL;     \
		va_start(ap, fmt);                                      \
		vlog((lvl), e, fmt, ap);                                \
		va_end(ap);                                             \
	}

LOG_FN(log_debug, LOG_LVL_DEBUG, 0)
LOG_FN(log_info, LOG_LVL_INFO, 0)
LOG_FN(log_warn, LOG_LVL_WARN, 1)
LOG_FN(log_warnx, LOG_LVL_WARN, 0)
LOG_FN(log_error, LOG_LVL_ERROR, 0)
LOG_FN(log_fatalx, LOG_LVL_FATAL, 0)
