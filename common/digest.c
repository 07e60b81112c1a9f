/* digest.c - SHA-1/MD5 hex and raw digests over OpenSSL EVP, with the
 * EVP_MD implementations fetched once per process (pthread_once) so each
 * call does no provider look-up. */
#include "digest.h"

#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

static pthread_once_t digest_once = PTHREAD_ONCE_INIT;
/* Fetched once, held for the life of the process (never freed). */
static const EVP_MD *digest_sha1_md;
static const EVP_MD *digest_md5_md;

static void
digest_init(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	digest_sha1_md = EVP_MD_fetch(NULL, "SHA1", NULL);
	digest_md5_md = EVP_MD_fetch(NULL, "MD5", NULL);
#endif
	/* Pre-3.0 libcrypto, or a provider set without them: the built-in
	 * (implicitly fetched) methods still work, only slower. */
	if (digest_sha1_md == NULL)
		digest_sha1_md = EVP_sha1();
	if (digest_md5_md == NULL)
		digest_md5_md = EVP_md5();
}

static void
digest_to_hex(const unsigned char *md, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < len; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0x0f];
	}
	out[2 * len] = '\0';
}

/* One-shot digest of data into md (size want bytes). */
static int
digest_oneshot(const EVP_MD *type, const void *data, size_t len,
               unsigned char *md, unsigned int want)
{
	unsigned int got = 0;
	static const unsigned char empty[1];

	if (type == NULL)
		return -1;
	if (data == NULL)
		data = empty;
	if (EVP_Digest(data, len, md, &got, type, NULL) != 1 || got != want)
		return -1;
	return 0;
}

int
digest_sha1_hex(const void *data, size_t len, char out[DIGEST_SHA1_HEX_SIZE])
{
	unsigned char md[DIGEST_SHA1_LEN];

	pthread_once(&digest_once, digest_init);
	if (digest_oneshot(digest_sha1_md, data, len, md, sizeof(md)) == -1) {
		out[0] = '\0';
		return -1;
	}
	digest_to_hex(md, sizeof(md), out);
	return 0;
}

int
digest_md5_raw(const void *data, size_t len, unsigned char out[DIGEST_MD5_LEN])
{
	pthread_once(&digest_once, digest_init);
	if (digest_oneshot(digest_md5_md, data, len, out, DIGEST_MD5_LEN) == -1) {
		memset(out, 0, DIGEST_MD5_LEN);
		return -1;
	}
	return 0;
}

int
digest_md5_hex(const void *data, size_t len, char out[DIGEST_MD5_HEX_SIZE])
{
	unsigned char md[DIGEST_MD5_LEN];

	if (digest_md5_raw(data, len, md) == -1) {
		out[0] = '\0';
		return -1;
	}
	digest_to_hex(md, sizeof(md), out);
	return 0;
}

int
digest_client_id(const char *ip, const char *ua, char out[DIGEST_SHA1_HEX_SIZE])
{
	unsigned char md[DIGEST_SHA1_LEN];
	unsigned int got = 0;
	EVP_MD_CTX *ctx;
	int ok;

	pthread_once(&digest_once, digest_init);
	out[0] = '\0';
	if (ip == NULL)
		ip = "";
	if (ua == NULL)
		ua = "";
	if (digest_sha1_md == NULL || (ctx = EVP_MD_CTX_new()) == NULL)
		return -1;
	ok = EVP_DigestInit_ex(ctx, digest_sha1_md, NULL) == 1 &&
	    EVP_DigestUpdate(ctx, ip, strlen(ip)) == 1 &&
	    EVP_DigestUpdate(ctx, "&", 1) == 1 &&
	    EVP_DigestUpdate(ctx, ua, strlen(ua)) == 1 &&
	    EVP_DigestFinal_ex(ctx, md, &got) == 1 && got == sizeof(md);
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -1;
	digest_to_hex(md, sizeof(md), out);
	return 0;
}
