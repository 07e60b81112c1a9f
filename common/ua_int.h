/* ua_int.h - internals shared by ua.c, ua_analyse.c, ua_prefilter.c, ua_cache.c, ua_type.c
 * (literal pre-filter, result cache, device-type rules). Not for other modules;
 * the names are ua_-prefixed only because they cross files. */
#ifndef LP_UA_INT_H
#define LP_UA_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ua.h"

/* ---- pattern analysis (ua_analyse.c) --------------------------------------- */

#define UA_AN_KEEP 3 /* "one of" sets kept per pattern */

/* What a pattern requires: each of the nsets sets must have a member in the
 * subject. Literals are ASCII-lowercased; the memory is the result's own,
 * freed by ua_analyse_free. nsets 0: nothing certain. */
struct ua_an_result {
	int nsets;
	int nlit[UA_AN_KEEP];
	const unsigned char **lit[UA_AN_KEEP];
	size_t *len[UA_AN_KEEP];
	const void *set_src[UA_AN_KEEP]; /* internal */
	int score0;                       /* internal */
	void *arena;                      /* internal */
};

/* Analyses len bytes of a PCRE2 pattern. 0 (see res->nsets) or -1 on
 * ENOMEM; either way res must be released with ua_analyse_free. */
int ua_analyse(const char *pat, size_t len, struct ua_an_result *res);
void ua_analyse_free(struct ua_an_result *res);

/* ---- literal pre-filter (ua_prefilter.c) ---------------------------------
 * Each regex is analysed at load time into a conjunction of "one of these
 * literals must occur in the subject" sets (ASCII-lowercased, so the test is
 * valid for case-sensitive and caseless regexes alike). At parse time one
 * Aho-Corasick pass over the lowercased string marks every literal present;
 * a regex whose requirement fails cannot match and is not run. */

#define UA_PF_NONE UINT32_MAX    /* "no requirement": always run the regex */
#define UA_PF_MAX_LITERALS 65536 /* so the per-call bitset fits on the stack */
#define UA_PF_WORDS (UA_PF_MAX_LITERALS / 64)
#define UA_PF_MAX_REGEXES 8192 /* all three lists together */

struct ua_pf;

/* New empty pre-filter, owned by the caller (ua_pf_free), or NULL (ENOMEM). */
struct ua_pf *ua_pf_new(void);
void ua_pf_free(struct ua_pf *pf);

/* Analyses a PCRE2 pattern (len bytes) and records what it requires.
 * Returns a requirement handle for ua_pf_pass, or UA_PF_NONE when nothing
 * useful (or nothing certain) can be said; -1 via *err on ENOMEM. */
uint32_t ua_pf_analyse(struct ua_pf *pf, const char *pat, size_t len, int *err);

/* Registers a plain literal (matched ignoring ASCII case) and returns its id
 * for ua_pf_has, or -1 on ENOMEM / too many literals. */
int ua_pf_token(struct ua_pf *pf, const char *lit);

/* Builds the automaton once every regex and token is in. 0 or -1. */
int ua_pf_build(struct ua_pf *pf, char *errstr, size_t errstr_size);

/* Number of 64-bit words ua_pf_scan writes. */
size_t ua_pf_words(const struct ua_pf *pf);

/* Marks in bits (ua_pf_words words, zeroed here) every literal that occurs
 * in lower[0..n), which must already be ASCII-lowercased. */
void ua_pf_scan(const struct ua_pf *pf, const unsigned char *lower, size_t n,
                uint64_t *bits);

/* After ua_pf_build: indexes the requirements of regexes 0..nrx-1
 * (req[i] from ua_pf_analyse) for ua_pf_match. 0 or -1. */
int ua_pf_index(struct ua_pf *pf, const uint32_t *req, size_t nrx, char *errstr,
                size_t errstr_size);

/* ua_pf_scan, and also sets in rxbits ((nrx + 63) / 64 words) the regexes
 * whose requirement holds: the only ones that can match. */
void ua_pf_match(const struct ua_pf *pf, const unsigned char *lower, size_t n,
                 uint64_t *bits, uint64_t *rxbits);

/* 1 when the requirement req holds for bits (UA_PF_NONE always holds). */
int ua_pf_pass(const struct ua_pf *pf, uint32_t req, const uint64_t *bits);

static inline int
ua_pf_has(const uint64_t *bits, int id)
{
	return id >= 0 && (bits[(unsigned)id >> 6] >> ((unsigned)id & 63)) & 1;
}

/* Describes a requirement as text ("(a|b) & (c)") into buf, for tests. */
void ua_pf_describe(const struct ua_pf *pf, uint32_t req, char *buf, size_t size);

/* One line of sizes (literals, automaton, index) to f. */
void ua_pf_info(const struct ua_pf *pf, FILE *f);

/* Number of distinct literals registered. */
size_t ua_pf_literals(const struct ua_pf *pf);

/* The text of literal id (lowercase, NUL-terminated, owned by pf). */
const char *ua_pf_literal(const struct ua_pf *pf, size_t id);

/* ---- result cache (ua_cache.c) --------------------------------------------
 * Lock-striped hash, S3-FIFO eviction per stripe. */

struct ua_cache;

/* entries > 0. Owned by the caller (ua_cache_free); NULL on ENOMEM. */
struct ua_cache *ua_cache_new(size_t entries);
void ua_cache_free(struct ua_cache *c);
uint64_t ua_cache_hash(const struct ua_cache *c, const char *key, size_t n);
/* 1 and *out filled on a hit, 0 on a miss. */
int ua_cache_get(struct ua_cache *c, uint64_t h, const char *key, size_t n,
                 struct ua_result *out);
/* Inserts a copy of key and r (silently skipped on ENOMEM). */
void ua_cache_put(struct ua_cache *c, uint64_t h, const char *key, size_t n,
                  const struct ua_result *r);
void ua_cache_stats(struct ua_cache *c, struct ua_stats *st);

/* ---- device type and bot rules (ua_type.c) -------------------------------- */

#define UA_TYPE_MAX_BOT 128
#define UA_TYPE_MAX_MARK 64

struct ua_typer {
	int bot[UA_TYPE_MAX_BOT];   /* pre-filter ids of the bot tokens */
	int nbot;
	int mark[UA_TYPE_MAX_MARK]; /* pre-filter ids of the marker tokens */
};

/* Registers the tokens with pf (before ua_pf_build). 0 or -1 (ENOMEM). */
int ua_type_init(struct ua_typer *t, struct ua_pf *pf);

/* Sets r->type, r->device_type and r->is_bot from the parsed fields, the
 * pre-filter bits of the string and the lowercased string itself. */
void ua_type_classify(const struct ua_typer *t, const uint64_t *bits,
                      const unsigned char *lower, size_t n, struct ua_result *r);

/* ---- checks (ua.c), for the unit test and the fuzzer ---------------------- */

/* Parses running every regex in order (no pre-filter, no cache). */
int ua_parse_unfiltered(const struct ua_parser *p, const char *ua, size_t len,
                        struct ua_result *out);

/* Runs every regex the pre-filter rejects for this string and returns how
 * many match anyway (0 = the pre-filter was exact here); the first is
 * described in msg. -1 on ENOMEM. */
int ua_prefilter_check(const struct ua_parser *p, const char *ua, size_t len,
                       char *msg, size_t msg_size);

/* Writes each regex's list, line and pre-filter requirement to f. */
void ua_parser_dump(const struct ua_parser *p, FILE *f);

/* White space as fields are trimmed and blank user agents are told (ASCII
 * only, whatever the locale). */
static inline int
ua_is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

#endif
