/* arena.h - bump allocation for the jansson values of one round of --all:
 * a thread opts in, frees of arena memory are no-ops, and the whole round's
 * memory is taken back at once by arena_reset. */
#ifndef LP_REPORTS_ARENA_H
#define LP_REPORTS_ARENA_H

#include <stddef.h>

struct arena;

/* Makes jansson allocate through this module (from the calling thread's
 * arena, else malloc) and free through it (no-op for arena memory, else
 * free). Call once, before any jansson value exists. */
void arena_install(void);

/* A new arena of at most size bytes: address space reserved at once, pages
 * touched as they are used and kept across resets. At most ARENA_MAX exist
 * at a time. Caller owns it (arena_free, with no value of it still in use).
 * NULL with errstr when the space cannot be reserved or too many exist. */
#define ARENA_MAX 8
struct arena *arena_new(size_t size, char *errstr, size_t errstr_size);
void arena_free(struct arena *a);

/* From now on jansson values made by the calling thread come from a (NULL:
 * from malloc again). When a is full, allocations fall back to malloc. */
void arena_enter(struct arena *a);

/* Takes back everything a handed out. The caller must have released every
 * value made in a, and no value outside a may still point into it. */
void arena_reset(struct arena *a);

/* Bytes handed out by a since its last reset. */
size_t arena_used(const struct arena *a);

/* 1 when p lies in an arena. */
int arena_owns(const void *p);

/* What jansson calls (exported for the unit test): n bytes aligned to 16
 * from the thread's arena, else malloc; and the matching free. */
void *arena_alloc(size_t n);
void arena_release(void *p);

#endif
