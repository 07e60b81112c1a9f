/* digest.h - SHA-1 and MD5 through OpenSSL libcrypto (EVP), as lower-case hex
 * or raw bytes, and the visitor identity digest_client_id. All functions are
 * thread-safe and allocate nothing the caller must free. */
#ifndef LP_DIGEST_H
#define LP_DIGEST_H

#include <stddef.h>

#define DIGEST_SHA1_LEN      20
#define DIGEST_MD5_LEN       16
#define DIGEST_SHA1_HEX_SIZE 41 /* 40 hex digits + NUL */
#define DIGEST_MD5_HEX_SIZE  33 /* 32 hex digits + NUL */

/* SHA-1 of len bytes at data (data may be NULL when len is 0), written as 40
 * lower-case hex digits plus NUL into the caller's out. Returns 0, or -1 when
 * libcrypto fails (out of memory); out is then "". */
int digest_sha1_hex(const void *data, size_t len, char out[DIGEST_SHA1_HEX_SIZE]);

/* MD5 as 32 lower-case hex digits plus NUL; otherwise as digest_sha1_hex. */
int digest_md5_hex(const void *data, size_t len, char out[DIGEST_MD5_HEX_SIZE]);

/* MD5 as 16 raw bytes into the caller's out. Returns 0, or -1 when libcrypto
 * fails; out is then zeroed. */
int digest_md5_raw(const void *data, size_t len, unsigned char out[DIGEST_MD5_LEN]);

/* The visitor identity stored in visit_record.client_id: the lower-case hex
 * SHA-1 of the bytes of ip, then one '&', then the bytes of ua, with no
 * terminator, trimming or case change (ip "10.8.4.7", ua "Mozilla/5.0 ..."
 * hashes "10.8.4.7&Mozilla/5.0 ..."). A NULL ua (no User-Agent header) and a
 * NULL ip are hashed as the empty string, so ("1.2.3.4", NULL) and
 * ("1.2.3.4", "") give the same id: SHA-1 of "1.2.3.4&". Returns 0, or -1
 * when libcrypto fails; out is then "". */
int digest_client_id(const char *ip, const char *ua, char out[DIGEST_SHA1_HEX_SIZE]);

#endif
