/* errstr.h - fills a caller's (char *errstr, size_t errstr_size) pair, the
 * librdkafka-style error detail every module returns with -1. */
#ifndef LP_ERRSTR_H
#define LP_ERRSTR_H

#include <stdarg.h>
#include <stddef.h>

/* printf into errstr; a NULL errstr or zero size is allowed and ignored.
 * The result is always valid UTF-8 (errstr_utf8_clean): a message cut at
 * errstr_size, or quoting cut input, never ends inside a character, so it
 * can go into a text column or a JSON string as it is. */
void errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* errstr_set with a va_list, for modules with formatters of their own. */
void errstr_vset(char *errstr, size_t errstr_size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Makes the NUL-terminated s valid UTF-8 in place: every byte that does not
 * start a well-formed sequence (RFC 3629: no overlong forms, surrogates or
 * code points past U+10FFFF), including a sequence cut short, becomes '?'.
 * Returns the number of bytes replaced. */
size_t errstr_utf8_clean(char *s);

/* 1 when the NUL-terminated s is well-formed UTF-8 (as errstr_utf8_clean
 * would leave it unchanged), else 0. s is not modified. */
int errstr_utf8_valid(const char *s);

#endif
