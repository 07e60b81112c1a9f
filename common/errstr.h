/* errstr.h - fills a caller's (char *errstr, size_t errstr_size) pair, the
 * librdkafka-style error detail every module returns with -1. */
#ifndef LP_ERRSTR_H
#define LP_ERRSTR_H

#include <stddef.h>

/* printf into errstr; a NULL errstr or zero size is allowed and ignored. */
void errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
