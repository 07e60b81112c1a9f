/* log.h - leveled, structured logging to stderr (logfmt or JSON lines).
 * Names follow OpenSMTPD: log_warn appends strerror(errno), log_warnx does not.
 * Nothing here exits: log_fatal only logs; main.c decides to exit. */
#ifndef LP_LOG_H
#define LP_LOG_H

#include <stddef.h>

enum log_level { LOG_LVL_DEBUG = 0, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERROR, LOG_LVL_FATAL };
enum log_format { LOG_FMT_LOGFMT = 0, LOG_FMT_JSON };

/* Set program name (borrowed, must outlive logging), level and format names
 * ("debug|info|warn|error", "logfmt|json"). NULL keeps the current value.
 * Returns 0, or -1 with errstr set for an unknown name. Thread-safe to call
 * again later (SIGHUP reload). */
int log_init(const char *progname, const char *level, const char *format,
             char *errstr, size_t errstr_size);

/* 1 when messages at this level would be written. */
int log_enabled(enum log_level lvl);

void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* log_warn appends ": strerror(errno)". */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs at level "fatal"; the caller (main.c) exits. */
void log_fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
