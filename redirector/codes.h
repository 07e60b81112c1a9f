/* codes.h - short-code generation for the links API, without I/O: base62 in
 * the seed's alphabet, code and alias validation, reserved words, random
 * (CSPRNG), hash (MD5 of the URL) and sequence (keyed permutation) codes. */
#ifndef LP_CODES_H
#define LP_CODES_H

#include <stddef.h>
#include <stdint.h>

/* The seed's alphabet; a character's index is its digit value, so 'a' is the
 * zero digit and 'Z' is 61. */
#define CODES_ALPHABET "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define CODES_BASE 62

#define CODES_GEN_MIN 1         /* generated codes: 1..8 characters */
#define CODES_GEN_MAX 8
#define CODES_GEN_SIZE 9        /* a generated code plus NUL */
#define CODES_ALIAS_MAX 64      /* custom aliases: 1..64 of [A-Za-z0-9_-] */
#define CODES_BASE62_MAX 11     /* digits of the largest uint64_t */
#define CODES_HASH_CANDIDATES 4

/* 62^length for length 1..10, else 0 (62^11 does not fit 64 bits): the
 * number of distinct codes of that length. */
uint64_t codes_space(int length);

/* Writes v in base62 with exactly width digits (1..11), left-padded with the
 * zero digit 'a', plus NUL, into the caller's out (width + 1 bytes).
 * Returns 0, or -1 (out "") when width is out of range or v >= 62^width. */
int codes_base62_encode(uint64_t v, int width, char *out);

/* Reads the NUL-terminated base62 string s (1..11 characters of the
 * alphabet, leading 'a's allowed) into *out. Returns 0, or -1 (*out left
 * unchanged) for an empty, too long, non-alphabet or overflowing string. */
int codes_base62_decode(const char *s, uint64_t *out);

/* 1 when code (borrowed, may be NULL) is a well-formed generated code:
 * 1..8 characters of CODES_ALPHABET. Else 0. */
int codes_valid_generated(const char *code);

/* 1 when alias (borrowed, may be NULL) is a well-formed custom alias:
 * 1..64 characters of [A-Za-z0-9_-]. Else 0. Does not check reserved words. */
int codes_valid_alias(const char *alias);

/* 1 when code (borrowed, may be NULL -> 0) equals, ignoring ASCII case, one
 * of the words that name our own paths and so can never be a short code:
 *   api healthz readyz metrics admin static favicon.ico robots.txt login
 *   logout docs openapi.yaml www app dashboard reports help about s r
 * Both generated codes and aliases must be checked against it. */
int codes_is_reserved(const char *code);

/* A random code of length 1..8 characters, each drawn uniformly from the 62
 * of the alphabet with OpenSSL's CSPRNG (RAND_bytes) and rejection sampling
 * (bytes >= 248 are discarded, so every character has probability 1/62).
 * Never a reserved word (codes_is_reserved): drawn again. out is the
 * caller's, length + 1 bytes. Returns 0, or -1 with errstr set
 * (bad length, RAND_bytes failure). Thread-safe. */
int codes_random(int length, char *out, char *errstr, size_t errstr_size);

/* The seed's hash strategy, with its `& 0x3D` bug fixed: d = MD5 of the url
 * bytes (url may be NULL when len is 0); when salt > 0, MD5 of the url bytes
 * followed by '#' and salt in decimal ("https://x.y/#1", "...#2", ...). Each
 * of the 4 big-endian 32-bit words v of d (the 8-hex-digit quarters of the
 * hex digest) gives one candidate: length times { c = CODES_ALPHABET[v % 62];
 * v >>= 32 / length }. length is 1..8; out is the caller's and gets 4
 * NUL-terminated candidates. The caller tries them in order; when all 4 are
 * taken it calls again with salt 1, 2, ... (and stores the unsalted url), so
 * a code is always found. Returns 0, or -1 (bad length or salt < 0,
 * libcrypto failure, out of memory) with every out[i] "". Thread-safe. */
int codes_hash_candidates(const char *url, size_t len, int length, int salt,
                          char out[CODES_HASH_CANDIDATES][CODES_GEN_SIZE]);

/* The sequence strategy's key: 32 bytes of key material. A plain value that
 * holds no resources: copy it freely, nothing to free; it may be shared by
 * any number of threads. */
struct codes_key {
	unsigned char k[32];
};

/* Derives a key from a configured secret (borrowed NUL-terminated string, at
 * least 1 byte; use 32+ random bytes, e.g. 64 hex digits) as HMAC-SHA256
 * keyed with the secret over the label "linkpulse codes_seq v1". The same
 * secret always gives the same key, hence the same codes. Returns 0, or -1
 * for a NULL or empty secret or a libcrypto failure (out zeroed). */
int codes_seq_key_from_secret(const char *secret, struct codes_key *out);

/* The sequence strategy: a keyed bijection of [0, 62^length), length 1..8,
 * so distinct counters give distinct codes with no look-up, and consecutive
 * counters give unrelated-looking codes. It is an 8-round balanced Feistel
 * network over the 6*length-bit domain [0, 64^length) (round function:
 * AES-256 under key, via OpenSSL EVP, of the round number, length and the
 * right half), cycle-walked until the value falls inside [0, 62^length);
 * the value is written with codes_base62_encode at exactly length digits.
 * out is the caller's, length + 1 bytes. Returns 0, or -1 with errstr set
 * (bad length, counter >= 62^length, libcrypto failure; out ""). The
 * permutation depends on key and on length. Thread-safe. */
int codes_seq_encode(const struct codes_key *key, uint64_t counter, int length,
                     char *out, char *errstr, size_t errstr_size);

/* The inverse of codes_seq_encode: the counter whose code (borrowed, 1..8
 * alphabet characters; its length selects the permutation) is code, into
 * *counter. Returns 0, or -1 with errstr set (malformed code, libcrypto
 * failure; *counter unchanged). Thread-safe. */
int codes_seq_decode(const struct codes_key *key, const char *code,
                     uint64_t *counter, char *errstr, size_t errstr_size);

#endif
