/* idmark.h - the event ids' high-water mark in the spool directory
 * (spool_dir/eventid.mark): a time no id of an earlier run reached, so that
 * a run whose clock is behind goes on after them (eventid_floor). */
#ifndef LP_IDMARK_H
#define LP_IDMARK_H

#include <stddef.h>
#include <stdint.h>

/* The mark in dir (ms since the Unix epoch), 0 when there is none; -1 with
 * errstr when the file exists but cannot be read or holds no number. */
int64_t idmark_load(const char *dir, char *errstr, size_t errstr_size);

/* Writes ms as dir's mark (a temporary file, fsynced, renamed over the old
 * one, the directory fsynced). Returns 0, or -1 with errstr. */
int idmark_store(const char *dir, int64_t ms, char *errstr, size_t errstr_size);

#endif
