/* test_arena.c - reports/arena.c against tests/data/arena_cases.txt (sizes,
 * alignment, fallback to malloc, reset), then jansson values that outlive an
 * arena's round, the limit on live arenas, and two threads with arenas of their
 * own. Run from the repository root. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../reports/arena.h"
#include "unit.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#define CASES "tests/data/arena_cases.txt"

/* Runs one command of a case; *a is the case's arena, *next where the next
 * arena allocation must start (NULL: not known yet). */
static void
command(char **fld, int nf, const char *where, struct arena **a, char **next)
{
	char err[128];

	if (strcmp(fld[0], "new") == 0 && nf == 2) {
		*a = arena_new((size_t)strtoull(fld[1], NULL, 10), err, sizeof(err));
		CHECK(*a != NULL, "%s: arena_new: %s", where, err);
		arena_enter(*a);
		*next = NULL;
	} else if (*a == NULL) {
		CHECK(0, "%s: no arena (a case starts with new)", where);
	} else if (strcmp(fld[0], "alloc") == 0 && nf == 3) {
		size_t n = (size_t)strtoull(fld[1], NULL, 10), before = arena_used(*a);
		size_t step = (n + 15) & ~(size_t)15;  /* n rounded up to the alignment */
		char *p = arena_alloc(n);
		int in = p != NULL && arena_owns(p), want = strcmp(fld[2], "arena") == 0;

		CHECK(p != NULL, "%s: alloc %zu returned NULL", where, n);
		CHECK(((uintptr_t)p & 15) == 0, "%s: %p not aligned to 16", where, (void *)p);
		CHECK(in == want, "%s: alloc %zu from %s, want %s", where, n, in ? "arena" : "malloc",
		    fld[2]);
		if (in) {
			CHECK(*next == NULL || p == *next, "%s: alloc at %p, want %p", where, (void *)p,
			    (void *)*next);
			CHECK(arena_used(*a) == before + step, "%s: used %zu after %zu",
			    where, arena_used(*a), before);
			memset(p, 0xA5, n);
			*next = p + step;
		} else {
			CHECK(arena_used(*a) == before, "%s: a malloc'd block moved used", where);
		}
		arena_release(p);
	} else if (strcmp(fld[0], "used") == 0 && nf == 2) {
		size_t want = (size_t)strtoull(fld[1], NULL, 10);

		CHECK(arena_used(*a) == want, "%s: used %zu, want %zu", where, arena_used(*a), want);
	} else if (strcmp(fld[0], "reset") == 0) {
		arena_reset(*a);
		*next = NULL;
	} else if (strcmp(fld[0], "leave") == 0) {
		arena_enter(NULL);
	} else if (strcmp(fld[0], "enter") == 0) {
		arena_enter(*a);
	} else if (strcmp(fld[0], "json") == 0 && nf == 2) {
		size_t before = arena_used(*a);
		long n = unit_unescape(fld[1]);
		json_t *v = n < 0 ? NULL : json_loadb(fld[1], (size_t)n, JSON_DECODE_ANY, NULL);
		char *text = v == NULL ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

		CHECK(v != NULL, "%s: not parsed", where);
		CHECK(v == NULL || arena_owns(v), "%s: value not in the arena", where);
		CHECK(arena_used(*a) > before || (v != NULL && json_is_array(v) &&
		    json_array_size(v) == 0 && arena_used(*a) >= before), "%s: arena not used", where);
		CHECK_STR(text, fld[1], where);
		arena_release(text);  /* json_dumps allocates as jansson does: from the arena */
		json_decref(v);
		*next = NULL;
	} else {
		CHECK(0, "%s: unknown command \"%s\"", where, fld[0]);
	}
}

static void
run_cases(void)
{
	FILE *f = fopen(CASES, "r");
	char line[4096], where[64], *next = NULL;
	struct arena *a = NULL;
	int lineno = 0, ncases = 0;

	CHECK(f != NULL, "cannot open %s (run from the repository root)", CASES);
	if (f == NULL)
		return;
	for (;;) {
		char *fld[4], *got = fgets(line, sizeof(line), f);
		int nf;

		lineno++;
		if (got != NULL)
			line[strcspn(line, "\n")] = '\0';
		if (got == NULL || line[0] == '\0') {  /* end of a case */
			if (a != NULL) {
				arena_enter(NULL);
				arena_free(a);
				a = NULL;
				ncases++;
			}
			if (got == NULL)
				break;
			continue;
		}
		if (line[0] == '#')
			continue;
		snprintf(where, sizeof(where), "%s:%d", CASES, lineno);
		nf = unit_split_tabs(line, fld, 4);
		command(fld, nf, where, &a, &next);
	}
	fclose(f);
	CHECK(ncases >= 5, "%s: only %d cases", CASES, ncases);
}

/* A value made with malloc, referenced from arena values: the arena's
 * release gives its references back, and it survives the reset. */
static void
test_outside_value(void)
{
	char err[128];
	struct arena *a = arena_new(1 << 20, err, sizeof(err));
	json_t *shared = json_string("shared"), *obj;

	CHECK(a != NULL && shared != NULL && !arena_owns(shared), "setup: %s", err);
	if (a == NULL || shared == NULL)
		return;
	arena_enter(a);
	obj = json_object();
	json_object_set(obj, "s", shared);
	CHECK(arena_owns(obj) && shared->refcount == 2, "reference from the arena");
	json_decref(obj);
	arena_reset(a);
	arena_enter(NULL);
	CHECK(shared->refcount == 1 && strcmp(json_string_value(shared), "shared") == 0,
	    "the outside value intact, refcount %zu", shared->refcount);
	json_decref(shared);
	arena_free(a);
}

static void
test_limit(void)
{
	struct arena *a[ARENA_MAX + 1];
	char err[128] = "";
	int made = 0;

	for (int i = 0; i < ARENA_MAX; i++)
		made += (a[i] = arena_new(4096, err, sizeof(err))) != NULL;
	CHECK(made == ARENA_MAX, "%d of %d arenas made: %s", made, ARENA_MAX, err);
	err[0] = '\0';
	a[ARENA_MAX] = arena_new(4096, err, sizeof(err));
	CHECK(a[ARENA_MAX] == NULL && err[0] != '\0', "arena %d made", ARENA_MAX + 1);
	for (int i = 0; i <= ARENA_MAX; i++)
		arena_free(a[i]);
	a[0] = arena_new(4096, err, sizeof(err));
	CHECK(a[0] != NULL, "a slot freed is usable again: %s", err);
	arena_free(a[0]);
	arena_free(NULL);
}

struct worker {
	struct arena *a;
	int ok;
};

static void *
work(void *arg)
{
	struct worker *w = arg;

	arena_enter(w->a);
	w->ok = 1;
	for (int i = 0; i < 1000; i++) {
		json_t *v = json_pack("{s:i, s:s}", "i", i, "s", "value");

		w->ok &= v != NULL && arena_owns(v);
		json_decref(v);
	}
	w->ok &= arena_used(w->a) > 0;
	arena_enter(NULL);
	return NULL;
}

/* Two threads, an arena each: each allocates from its own, none from the
 * other's, and a thread that entered none uses malloc meanwhile. */
static void
test_threads(void)
{
	struct worker w[2];
	pthread_t t[2];
	char err[128];
	json_t *mine;

	for (int i = 0; i < 2; i++) {
		w[i].a = arena_new(1 << 22, err, sizeof(err));
		CHECK(w[i].a != NULL, "arena_new: %s", err);
		if (w[i].a == NULL)
			return;
	}
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, work, &w[i]);
	mine = json_string("main thread");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK(w[0].ok && w[1].ok, "worker arenas: %d %d", w[0].ok, w[1].ok);
	CHECK(arena_used(w[0].a) == arena_used(w[1].a), "the same work, different use: %zu %zu",
	    arena_used(w[0].a), arena_used(w[1].a));
	CHECK(mine != NULL && !arena_owns(mine), "the main thread's value in an arena");
	json_decref(mine);
	for (int i = 0; i < 2; i++)
		arena_free(w[i].a);
}

/* Under AddressSanitizer (make SANITIZE=1) memory handed out is usable and
 * memory taken back by a reset is poisoned: a use after the reset fails. */
static void
test_poison(void)
{
#if defined(__SANITIZE_ADDRESS__)
	char err[128];
	struct arena *a = arena_new(4096, err, sizeof(err));
	char *p;

	CHECK(a != NULL, "arena_new: %s", err);
	if (a == NULL)
		return;
	arena_enter(a);
	p = arena_alloc(40);
	CHECK(p != NULL && !__asan_region_is_poisoned(p, 40), "fresh memory poisoned");
	CHECK(__asan_address_is_poisoned(p + 48), "memory not handed out is usable");
	arena_reset(a);
	CHECK(__asan_address_is_poisoned(p), "memory taken back is usable");
	arena_enter(NULL);
	arena_free(a);
#endif
}

int
main(void)
{
	arena_install();
	run_cases();
	test_outside_value();
	test_limit();
	test_threads();
	test_poison();
	return unit_done("test_arena");
}
