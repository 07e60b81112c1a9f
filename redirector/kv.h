/* kv.h - Redis access (hiredis) through a small connection pool with short
 * timeouts; when Redis is down, calls fail fast for a second instead of
 * stalling requests, and the idle connections are dropped (after a restart
 * every one of them is dead). Redis is only ever a cache here: callers fall
 * back. */
#ifndef LP_KV_H
#define LP_KV_H

#include <hiredis/hiredis.h>
#include <stddef.h>

struct kv;

/* url: "redis://host:port[/db]" or "" (no Redis: every call fails fast).
 * Copies what it needs. Never connects here. Free with kv_free. */
struct kv *kv_new(const char *url, int size, int timeout_ms, char *errstr, size_t errstr_size);
void kv_free(struct kv *kv);

/* Runs one command (hiredis format). Returns the reply (caller frees with
 * freeReplyObject) or NULL when Redis is unavailable or answered an error. */
redisReply *kv_cmd(struct kv *kv, const char *fmt, ...);

/* Runs n commands in one round trip (argv form: argc[i] strings argv[i]).
 * replies[i] receive the replies (caller frees each); returns 0, or -1 when
 * Redis is unavailable (replies then all NULL). */
int kv_pipeline(struct kv *kv, int n, const int *argc, const char *const *const *argv,
                const size_t *const *argvlen, redisReply **replies);

/* 1 while Redis is believed reachable. */
int kv_up(struct kv *kv);

/* 1 when a Redis URL was configured (reachable or not). */
int kv_enabled(struct kv *kv);

#endif
