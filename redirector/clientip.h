/* clientip.h - the visitor's address: the TCP peer, or, when the peer is a
 * configured trusted proxy, the right-most X-Forwarded-For hop that is not
 * itself trusted. */
#ifndef LP_CLIENTIP_H
#define LP_CLIENTIP_H

#include <stddef.h>
#include <sys/socket.h>

#define CLIENTIP_MAX 64 /* room for any address text */

struct clientip;

/* cidrs: comma-separated list such as "10.0.0.0/8, 127.0.0.1, ::1/128" (an
 * address without /len is a single host); NULL or "" trusts nobody. Returns
 * NULL with errstr naming the bad entry. Free with clientip_free. */
struct clientip *clientip_new(const char *cidrs, char *errstr, size_t errstr_size);
void clientip_free(struct clientip *c);

/* Writes the client address (normalised text, IPv4-mapped IPv6 as IPv4) to
 * out. peer is the TCP peer (NULL: ""); xff the X-Forwarded-For value (all
 * such headers joined with ","), or NULL. XFF is used only when the peer is
 * trusted; walking it from the right, trusted hops are skipped and the first
 * untrusted one is the client. A hop that does not parse stops the walk: the
 * last good address to its right is used. When every hop is trusted the
 * left-most one is the client. Returns out. */
char *clientip_resolve(const struct clientip *c, const struct sockaddr *peer, const char *xff,
                       char out[CLIENTIP_MAX]);

/* 1 when the TCP peer is trusted, i.e. when clientip_resolve would read
 * X-Forwarded-For (callers skip collecting it otherwise). */
int clientip_peer_trusted(const struct clientip *c, const struct sockaddr *peer);

/* Same with the peer given as text (tests). */
char *clientip_resolve_text(const struct clientip *c, const char *peer, const char *xff,
                            char out[CLIENTIP_MAX]);

#endif
