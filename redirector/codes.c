/* codes.c - short codes without I/O: base62 in the seed's alphabet,
 * validation, reserved words, and the random (RAND_bytes), hash (MD5, the
 * seed's algorithm with % 62) and sequence (keyed Feistel permutation over
 * AES-256, cycle-walked into [0, 62^n)) strategies. */
#include "codes.h"
#include "errstr.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "digest.h"

#define SEQ_ROUNDS 8
#define SEQ_LABEL "linkpulse codes_seq v1"

static const char codes_alphabet[] = CODES_ALPHABET;

static const char *const codes_reserved[] = {
	"api", "healthz", "readyz", "metrics", "admin", "static", "favicon.ico",
	"robots.txt", "login", "logout", "docs", "openapi.yaml", "www", "app",
	"dashboard", "reports", "help", "about", "s", "r",
	/* /api/v1/links/bulk and /resolve: a link with such a code could not
	 * be read, changed or deleted at /api/v1/links/{code} */
	"bulk", "resolve",
};

static pthread_once_t codes_once = PTHREAD_ONCE_INIT;
/* Fetched once, held for the life of the process (never freed). */
static const EVP_CIPHER *codes_aes;
/* Digit value of each byte, -1 outside the alphabet; filled once. */
static signed char codes_digit[256];

static void
codes_init(void)
{
	size_t i;

	memset(codes_digit, -1, sizeof(codes_digit));
	for (i = 0; i < CODES_BASE; i++)
		codes_digit[(unsigned char)codes_alphabet[i]] = (signed char)i;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	codes_aes = EVP_CIPHER_fetch(NULL, "AES-256-ECB", NULL);
#endif
	if (codes_aes == NULL)
		codes_aes = EVP_aes_256_ecb();
}

uint64_t
codes_space(int length)
{
	uint64_t v = 1;
	int i;

	if (length < 1 || length > CODES_BASE62_MAX - 1)
		return 0;
	for (i = 0; i < length; i++)
		v *= CODES_BASE;
	return v;
}

int
codes_base62_encode(uint64_t v, int width, char *out)
{
	int i;

	if (width < 1 || width > CODES_BASE62_MAX) {
		if (out != NULL)
			out[0] = '\0';
		return -1;
	}
	/* 62^11 > 2^64: any value fits 11 digits. */
	if (width < CODES_BASE62_MAX && v >= codes_space(width)) {
		out[0] = '\0';
		return -1;
	}
	for (i = width - 1; i >= 0; i--) {
		out[i] = codes_alphabet[v % CODES_BASE];
		v /= CODES_BASE;
	}
	out[width] = '\0';
	return 0;
}

int
codes_base62_decode(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	size_t i, n;

	pthread_once(&codes_once, codes_init);
	if (s == NULL || (n = strlen(s)) == 0 || n > CODES_BASE62_MAX)
		return -1;
	for (i = 0; i < n; i++) {
		int d = codes_digit[(unsigned char)s[i]];

		if (d < 0)
			return -1;
		if (v > (UINT64_MAX - (uint64_t)d) / CODES_BASE)
			return -1;
		v = v * CODES_BASE + (uint64_t)d;
	}
	*out = v;
	return 0;
}

int
codes_valid_generated(const char *code)
{
	size_t i;

	pthread_once(&codes_once, codes_init);
	if (code == NULL)
		return 0;
	for (i = 0; code[i] != '\0'; i++)
		if (i >= CODES_GEN_MAX || codes_digit[(unsigned char)code[i]] < 0)
			return 0;
	return i >= CODES_GEN_MIN;
}

int
codes_valid_alias(const char *alias)
{
	size_t i;

	if (alias == NULL)
		return 0;
	for (i = 0; alias[i] != '\0'; i++) {
		unsigned char c = (unsigned char)alias[i];

		if (i >= CODES_ALIAS_MAX)
			return 0;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return i >= 1;
}

int
codes_is_reserved(const char *code)
{
	size_t i;

	if (code == NULL)
		return 0;
	for (i = 0; i < sizeof(codes_reserved) / sizeof(codes_reserved[0]); i++)
		if (strcasecmp(code, codes_reserved[i]) == 0)
			return 1;
	return 0;
}

int
codes_random(int length, char *out, char *errstr, size_t errstr_size)
{
	unsigned char buf[32];
	size_t pos = sizeof(buf);
	int have = 0;

	if (length < CODES_GEN_MIN || length > CODES_GEN_MAX) {
		if (out != NULL)
			out[0] = '\0';
		errstr_set(errstr, errstr_size, "random code length %d is not %d..%d",
		    length, CODES_GEN_MIN, CODES_GEN_MAX);
		return -1;
	}
	while (have < length) {
		if (pos == sizeof(buf)) {
			if (RAND_bytes(buf, (int)sizeof(buf)) != 1) {
				out[0] = '\0';
				errstr_set(errstr, errstr_size, "RAND_bytes failed");
				return -1;
			}
			pos = 0;
		}
		/* 248 = 4 * 62: keeping only bytes below it makes b % 62
		 * uniform; the 8 bytes above are discarded, not folded in. */
		if (buf[pos] < 4 * CODES_BASE)
			out[have++] = codes_alphabet[buf[pos] % CODES_BASE];
		pos++;
		/* a reserved word ("readyz", "s") would never redirect: draw
		 * again (every caller, the pool's refill included, gets here) */
		if (have == length) {
			out[length] = '\0';
			if (codes_is_reserved(out))
				have = 0;
		}
	}
	OPENSSL_cleanse(buf, sizeof(buf));
	return 0;
}

int
codes_hash_candidates(const char *url, size_t len, int length, int salt,
                      char out[CODES_HASH_CANDIDATES][CODES_GEN_SIZE])
{
	unsigned char md[DIGEST_MD5_LEN];
	int i, j, rc;

	for (i = 0; i < CODES_HASH_CANDIDATES; i++)
		out[i][0] = '\0';
	if (length < CODES_GEN_MIN || length > CODES_GEN_MAX || salt < 0)
		return -1;
	if (salt == 0) {
		rc = digest_md5_raw(url, len, md);
	} else {
		/* url, '#', up to 10 digits, NUL */
		char *buf = malloc(len + 16);
		int n;

		if (buf == NULL)
			return -1;
		if (len > 0)
			memcpy(buf, url, len);
		n = snprintf(buf + len, 16, "#%d", salt);
		rc = digest_md5_raw(buf, len + (size_t)n, md);
		free(buf);
	}
	if (rc == -1)
		return -1;
	for (i = 0; i < CODES_HASH_CANDIDATES; i++) {
		/* The seed's Long.parseLong(hex.substring(8i, 8i + 8), 16);
		 * 64 bits so that v >>= 32 (length 1) is defined. */
		uint64_t v = (uint64_t)md[4 * i] << 24 | (uint64_t)md[4 * i + 1] << 16 |
		    (uint64_t)md[4 * i + 2] << 8 | (uint64_t)md[4 * i + 3];

		for (j = 0; j < length; j++) {
			out[i][j] = codes_alphabet[v % CODES_BASE];
			v >>= 32 / length;
		}
		out[i][length] = '\0';
	}
	return 0;
}

int
codes_seq_key_from_secret(const char *secret, struct codes_key *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t n;

	memset(out->k, 0, sizeof(out->k));
	if (secret == NULL || (n = strlen(secret)) == 0 || n > INT32_MAX)
		return -1;
	if (HMAC(EVP_sha256(), secret, (int)n, (const unsigned char *)SEQ_LABEL,
	    sizeof(SEQ_LABEL) - 1, md, &mdlen) == NULL || mdlen != sizeof(out->k))
		return -1;
	memcpy(out->k, md, sizeof(out->k));
	OPENSSL_cleanse(md, sizeof(md));
	return 0;
}

/* One permutation of [0, 64^length): the Feistel network and its cipher. */
struct seq_perm {
	EVP_CIPHER_CTX *ctx;    /* owned; AES-256-ECB under the key */
	int length;
	unsigned half;          /* bits per half: 3 * length */
	uint64_t mask;          /* (1 << half) - 1 */
};

static int
seq_open(struct seq_perm *p, const struct codes_key *key, int length,
         char *errstr, size_t errstr_size)
{
	pthread_once(&codes_once, codes_init);
	p->length = length;
	p->half = 3u * (unsigned)length;
	p->mask = ((uint64_t)1 << p->half) - 1;
	if (codes_aes == NULL || (p->ctx = EVP_CIPHER_CTX_new()) == NULL ||
	    EVP_EncryptInit_ex(p->ctx, codes_aes, NULL, key->k, NULL) != 1 ||
	    EVP_CIPHER_CTX_set_padding(p->ctx, 0) != 1) {
		EVP_CIPHER_CTX_free(p->ctx);
		p->ctx = NULL;
		errstr_set(errstr, errstr_size, "libcrypto: cannot set up AES-256-ECB");
		return -1;
	}
	return 0;
}

static void
seq_close(struct seq_perm *p)
{
	EVP_CIPHER_CTX_free(p->ctx);
	p->ctx = NULL;
}

/* Round function: the low half bits of AES_K("LPsq", round, length, 0, 0,
 * r as 8 big-endian bytes). */
static int
seq_round(struct seq_perm *p, int round, uint64_t r, uint64_t *f)
{
	unsigned char in[16], ct[32];
	uint64_t v = 0;
	int i, outl = 0;

	memcpy(in, "LPsq", 4);
	in[4] = (unsigned char)round;
	in[5] = (unsigned char)p->length;
	in[6] = in[7] = 0;
	for (i = 0; i < 8; i++)
		in[8 + i] = (unsigned char)(r >> (56 - 8 * i));
	if (EVP_EncryptUpdate(p->ctx, ct, &outl, in, (int)sizeof(in)) != 1 || outl != 16)
		return -1;
	for (i = 0; i < 8; i++)
		v = v << 8 | ct[i];
	*f = v & p->mask;
	return 0;
}

/* x in [0, 64^length) -> its image (or preimage when inverse). */
static int
seq_feistel(struct seq_perm *p, uint64_t x, int inverse, uint64_t *y)
{
	uint64_t l = x >> p->half, r = x & p->mask, f, t;
	int i;

	for (i = 0; i < SEQ_ROUNDS; i++) {
		if (!inverse) {
			/* (l, r) -> (r, l ^ F_i(r)) */
			if (seq_round(p, i, r, &f) == -1)
				return -1;
			t = l ^ f;
			l = r;
			r = t;
		} else {
			/* (l, r) -> (r ^ F_i(l), l), rounds in reverse */
			if (seq_round(p, SEQ_ROUNDS - 1 - i, l, &f) == -1)
				return -1;
			t = r ^ f;
			r = l;
			l = t;
		}
	}
	*y = l << p->half | r;
	return 0;
}

/* Cycle walking: apply the permutation of [0, 64^length) until the value is
 * back in [0, 62^length). It ends because x itself lies on its cycle, and
 * it is a bijection of [0, 62^length) (and the inverse walk its inverse). */
static int
seq_walk(struct seq_perm *p, uint64_t x, int inverse, uint64_t *y,
         char *errstr, size_t errstr_size)
{
	uint64_t space = codes_space(p->length);

	do {
		if (seq_feistel(p, x, inverse, &x) == -1) {
			errstr_set(errstr, errstr_size, "libcrypto: AES-256-ECB failed");
			return -1;
		}
	} while (x >= space);
	*y = x;
	return 0;
}

int
codes_seq_encode(const struct codes_key *key, uint64_t counter, int length,
                 char *out, char *errstr, size_t errstr_size)
{
	struct seq_perm p;
	uint64_t v;
	int rc;

	if (out != NULL)
		out[0] = '\0';
	if (length < CODES_GEN_MIN || length > CODES_GEN_MAX) {
		errstr_set(errstr, errstr_size, "sequence code length %d is not %d..%d",
		    length, CODES_GEN_MIN, CODES_GEN_MAX);
		return -1;
	}
	if (counter >= codes_space(length)) {
		errstr_set(errstr, errstr_size, "counter %llu does not fit %d characters "
		    "(62^%d = %llu codes)", (unsigned long long)counter, length,
		    length, (unsigned long long)codes_space(length));
		return -1;
	}
	if (seq_open(&p, key, length, errstr, errstr_size) == -1)
		return -1;
	rc = seq_walk(&p, counter, 0, &v, errstr, errstr_size);
	seq_close(&p);
	if (rc == -1)
		return -1;
	return codes_base62_encode(v, length, out);
}

int
codes_seq_decode(const struct codes_key *key, const char *code,
                 uint64_t *counter, char *errstr, size_t errstr_size)
{
	struct seq_perm p;
	uint64_t v;
	int rc;

	if (!codes_valid_generated(code) || codes_base62_decode(code, &v) == -1) {
		errstr_set(errstr, errstr_size, "not a generated code (1..%d base62 characters)",
		    CODES_GEN_MAX);
		return -1;
	}
	if (seq_open(&p, key, (int)strlen(code), errstr, errstr_size) == -1)
		return -1;
	rc = seq_walk(&p, v, 1, &v, errstr, errstr_size);
	seq_close(&p);
	if (rc == -1)
		return -1;
	*counter = v;
	return 0;
}
