/* arena.c - bump allocation for the jansson values of one round of --all
 * (see arena.h): millions of small objects made and released per run cost
 * glibc's malloc and free more than building them. */
#include "arena.h"
#include "errstr.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ALIGN 16

/* n rounded up to ALIGN (less than n when that wraps). */
static size_t
align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

struct arena {
	char *base;   /* owned: size bytes of reserved address space */
	size_t size, used;
};

/* Every live arena, for arena_owns. Written only by arena_new and
 * arena_free, which the caller runs while no other thread uses arenas
 * (before it starts them and after it has joined them). */
static struct arena *live[ARENA_MAX];

static _Thread_local struct arena *current;

struct arena *
arena_new(size_t size, char *errstr, size_t errstr_size)
{
	struct arena *a;
	int slot = -1;

	for (int i = 0; i < ARENA_MAX && slot < 0; i++)
		if (live[i] == NULL)
			slot = i;
	if (slot < 0) {
		errstr_set(errstr, errstr_size, "arena: more than %d at once", ARENA_MAX);
		return NULL;
	}
	if ((a = calloc(1, sizeof(*a))) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	size = align_up(size);
	a->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
	    -1, 0);
	if (a->base == MAP_FAILED) {
		errstr_set(errstr, errstr_size, "arena: cannot reserve %zu bytes: %s", size, strerror(errno));
		free(a);
		return NULL;
	}
	a->size = size;
	POISON(a->base, size);
	live[slot] = a;
	return a;
}

void
arena_free(struct arena *a)
{
	if (a == NULL)
		return;
	for (int i = 0; i < ARENA_MAX; i++)
		if (live[i] == a)
			live[i] = NULL;
	UNPOISON(a->base, a->size);
	munmap(a->base, a->size);
	free(a);
}

void
arena_enter(struct arena *a)
{
	current = a;
}

void
arena_reset(struct arena *a)
{
	POISON(a->base, a->used);
	a->used = 0;
}

size_t
arena_used(const struct arena *a)
{
	return a->used;
}

int
arena_owns(const void *p)
{
	const char *c = p;

	for (int i = 0; i < ARENA_MAX; i++)
		if (live[i] != NULL && c >= live[i]->base && c < live[i]->base + live[i]->size)
			return 1;
	return 0;
}

void *
arena_alloc(size_t n)
{
	struct arena *a = current;
	size_t need = align_up(n);
	char *p;

	if (a == NULL || need < n || need > a->size - a->used)
		return malloc(n);
	p = a->base + a->used;
	a->used += need;
	UNPOISON(p, n);
	return p;
}

void
arena_release(void *p)
{
	if (p != NULL && !arena_owns(p))
		free(p);
}

void
arena_install(void)
{
	json_set_alloc_funcs(arena_alloc, arena_release);
}
