/* ldapload.c - the OpenLDAP calls of the static libpq that reports links,
 * forwarded to libldap loaded with dlopen at the first call: a report start
 * then does not map libldap and the GnuTLS/p11-kit chain it pulls (~10 ms). */
#define LDAP_DEPRECATED 1

#include "log.h"

#include <dlfcn.h>
#include <ldap.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#ifndef LP_LDAP_SONAME
#error "LP_LDAP_SONAME (the libldap that libpq links) must be defined by the Makefile"
#endif

/* Entry points in libldap: all set, or all NULL when it could not be loaded. */
static struct {
	LDAP *(*init)(LDAP_CONST char *, int);
	int (*set_option)(LDAP *, int, LDAP_CONST void *);
	int (*simple_bind)(LDAP *, LDAP_CONST char *, LDAP_CONST char *);
	char *(*err2string)(int);
	LDAPMessage *(*first_entry)(LDAP *, LDAPMessage *);
	int (*count_entries)(LDAP *, LDAPMessage *);
	struct berval **(*get_values_len)(LDAP *, LDAPMessage *, LDAP_CONST char *);
	void (*value_free_len)(struct berval **);
	int (*result)(LDAP *, int, int, struct timeval *, LDAPMessage **);
	int (*msgfree)(LDAPMessage *);
	int (*search_st)(LDAP *, LDAP_CONST char *, int, LDAP_CONST char *, char **, int,
	                 struct timeval *, LDAPMessage **);
	int (*unbind)(LDAP *);
} fn;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* dlsym's void * to a function pointer, through memcpy (ISO C has no cast). */
#define SYM(h, name, dst) do { void *p_ = dlsym((h), (name)); \
	_Static_assert(sizeof(p_) == sizeof(dst), "function pointer size"); \
	memcpy(&(dst), &p_, sizeof(dst)); ok = ok && p_ != NULL; } while (0)

static void
load(void)
{
	void *h = dlopen(LP_LDAP_SONAME, RTLD_NOW | RTLD_LOCAL);
	int ok = 1;

	if (h == NULL) {
		log_warnx("LDAP service lookup unavailable: %s", dlerror());
		return;
	}
	SYM(h, "ldap_init", fn.init);
	SYM(h, "ldap_set_option", fn.set_option);
	SYM(h, "ldap_simple_bind", fn.simple_bind);
	SYM(h, "ldap_err2string", fn.err2string);
	SYM(h, "ldap_first_entry", fn.first_entry);
	SYM(h, "ldap_count_entries", fn.count_entries);
	SYM(h, "ldap_get_values_len", fn.get_values_len);
	SYM(h, "ldap_value_free_len", fn.value_free_len);
	SYM(h, "ldap_result", fn.result);
	SYM(h, "ldap_msgfree", fn.msgfree);
	SYM(h, "ldap_search_st", fn.search_st);
	SYM(h, "ldap_unbind", fn.unbind);
	if (!ok) {
		log_warnx("LDAP service lookup unavailable: %s lacks a function libpq calls",
		    LP_LDAP_SONAME);
		memset(&fn, 0, sizeof(fn));
		dlclose(h);
	}
}

/* libpq's lookup starts with ldap_init: without libldap it returns NULL and
 * libpq reports "could not create LDAP structure". Every other call takes, or
 * follows a failed call on, the handle ldap_init returned, so libldap is
 * loaded by then and they forward without checking. */
LDAP *
ldap_init(LDAP_CONST char *host, int port)
{
	pthread_once(&once, load);
	return fn.init ? fn.init(host, port) : NULL;
}

int
ldap_set_option(LDAP *ld, int option, LDAP_CONST void *invalue)
{
	return fn.set_option(ld, option, invalue);
}

int
ldap_simple_bind(LDAP *ld, LDAP_CONST char *who, LDAP_CONST char *passwd)
{
	return fn.simple_bind(ld, who, passwd);
}

char *
ldap_err2string(int err)
{
	return fn.err2string(err);
}

LDAPMessage *
ldap_first_entry(LDAP *ld, LDAPMessage *chain)
{
	return fn.first_entry(ld, chain);
}

int
ldap_count_entries(LDAP *ld, LDAPMessage *chain)
{
	return fn.count_entries(ld, chain);
}

struct berval **
ldap_get_values_len(LDAP *ld, LDAPMessage *entry, LDAP_CONST char *target)
{
	return fn.get_values_len(ld, entry, target);
}

void
ldap_value_free_len(struct berval **vals)
{
	fn.value_free_len(vals);
}

int
ldap_result(LDAP *ld, int msgid, int all, struct timeval *timeout, LDAPMessage **result)
{
	return fn.result(ld, msgid, all, timeout, result);
}

int
ldap_msgfree(LDAPMessage *lm)
{
	return fn.msgfree(lm);
}

int
ldap_search_st(LDAP *ld, LDAP_CONST char *base, int scope, LDAP_CONST char *filter,
               char **attrs, int attrsonly, struct timeval *timeout, LDAPMessage **res)
{
	return fn.search_st(ld, base, scope, filter, attrs, attrsonly, timeout, res);
}

int
ldap_unbind(LDAP *ld)
{
	return fn.unbind(ld);
}
