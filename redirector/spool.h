/* spool.h - append-only on-disk spool for visit events Kafka could not take:
 * request and delivery threads append to a memory buffer, a background thread
 * writes and fsyncs it in batches; a replayer takes whole files back. */
#ifndef LP_SPOOL_H
#define LP_SPOOL_H

#include <stddef.h>
#include <stdint.h>

struct spool_conf {
	const char *dir;      /* created if missing; copied */
	uint64_t max_bytes;   /* cap on bytes spooled (on disk + buffered) */
	int fsync_ms;         /* batch interval of write + fdatasync */
};

struct spool;

/* Opens dir/spool.active for appending; a non-empty one left by an earlier
 * run is first renamed to a replay file so it is replayed. Starts the
 * writer thread. NULL with errstr on failure. */
struct spool *spool_open(const struct spool_conf *conf, char *errstr, size_t errstr_size);

/* Writes what is buffered (what cannot be written is counted as dropped),
 * fsyncs, stops the writer and releases the directory's lock; spool_stats
 * still answers after it (the final counts). Once; spool_close calls it if
 * it was not. */
void spool_stop(struct spool *s);

/* spool_stop if needed, then frees. */
void spool_close(struct spool *s);

/* Appends one record (key and value copied). Never blocks on I/O. Returns 0,
 * or -1 when the cap is reached (the record is dropped, counted and logged). */
int spool_append(struct spool *s, const void *key, size_t klen, const void *val, size_t vlen);

/* Picks a file to replay: the oldest replay file, else the active file once
 * it holds data (it is closed, renamed and a new active file started). Copies
 * its path to path and returns 1; 0 when the spool is empty; -1 on error. */
int spool_take(struct spool *s, char *path, size_t path_size);

/* Calls fn for each complete record of a file from spool_take, in order,
 * until fn returns non-zero (returned). A torn record at the end (crash
 * mid-write) ends the file with a warning. -1 when the file can't be read
 * (opened, or a read failed part-way: it is not taken as the end). */
typedef int (*spool_record_fn)(void *ctx, const char *key, size_t klen, const char *val,
                               size_t vlen);
int spool_read(const char *path, spool_record_fn fn, void *ctx);

/* Removes a replayed file and takes its bytes off the spool's total. 0, or
 * -1 when it cannot be removed (logged): the caller must not take it as
 * done, or the same file would be replayed again at once, forever. */
int spool_done(struct spool *s, const char *path);

/* Records Kafka refuses for good (larger than message.max.bytes, or an
 * invalid record) while replay_path (a file from spool_take) is replayed are
 * kept in dir/refused-<its number>.spool, so that they are neither lost nor
 * sent again and again, holding back the records after them; nothing
 * replays that file (an operator who raised the limit renames it to its
 * replay file's name: README). spool_refuse_open starts the file, empty (a
 * retry of the same replay file writes it again); spool_refuse appends one
 * record (any thread; no sync), 0 or -1 (logged: the replay must keep its
 * file); spool_refuse_close ends it: keep 1 (the replay file is done) syncs
 * it and its directory (its *n records, n may be NULL, are counted in refused when
 * spool_done then removes the replay file), 0 (the replay file stays) or
 * none written removes it. 0, or -1 when it could not be kept (then keep
 * the replay file too). */
int spool_refuse_open(struct spool *s, const char *replay_path);
int spool_refuse(struct spool *s, const void *key, size_t klen, const void *val, size_t vlen);
int spool_refuse_close(struct spool *s, int keep, uint64_t *n);

struct spool_stats {
	uint64_t appended;    /* records accepted */
	uint64_t dropped;     /* records refused by the cap or lost to a failed write */
	uint64_t refused;     /* records Kafka refused for good, kept in refused-*.spool */
	uint64_t bytes;       /* bytes spooled now (files + buffer) */
	uint64_t files;       /* replay files waiting (not counting the active one) */
};
void spool_stats(struct spool *s, struct spool_stats *out);

/* Counts the bytes and files again from the directory (the active file and
 * the records in memory as the spool knows them): after a replay file
 * vanished from outside, whose bytes were counted against spool_max_bytes
 * until a restart. */
void spool_recount(struct spool *s);

#endif
