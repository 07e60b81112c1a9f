/* config.c - table-driven configuration: defaults, "name = value" file,
 * LINKPULSE_* environment overrides and -o name=value arguments, each value
 * checked against its type and bounds. */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct cfg_opt *
find_opt(const struct cfg_prog *prog, const char *name)
{
	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++)
		if (strcmp(o->name, name) == 0)
			return o;
	return NULL;
}

static int
parse_bool(const char *v, int *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

static int
enum_ok(const char *choices, const char *v)
{
	size_t n = strlen(v);
	const char *p = choices;

	while (p != NULL && *p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && strncmp(p, v, n) == 0)
			return 1;
		p = bar ? bar + 1 : NULL;
	}
	return 0;
}

static int
set_opt(const struct cfg_opt *o, void *conf, const char *v, char *errstr,
        size_t errstr_size)
{
	char *base = conf, *end, *dup;
	long long n;
	int b;

	switch (o->type) {
	case CFG_INT:
		errno = 0;
		n = strtoll(v, &end, 10);
		/* strtoll also skips blanks and takes '+': only digits, with
		 * an optional '-', are an integer here */
		if (!((*v >= '0' && *v <= '9') || (*v == '-' && v[1] >= '0' && v[1] <= '9')) ||
		    *end != '\0') {
			snprintf(errstr, errstr_size, "%s: \"%s\" is not an integer",
			    o->name, v);
			return -1;
		}
		if (errno == ERANGE || n < o->min || n > o->max) {
			snprintf(errstr, errstr_size, "%s: %s is out of range [%lld, %lld]",
			    o->name, v, o->min, o->max);
			return -1;
		}
		*(long long *)(void *)(base + o->off) = n;
		return 0;
	case CFG_BOOL:
		if (parse_bool(v, &b) < 0) {
			snprintf(errstr, errstr_size,
			    "%s: \"%s\" is not a boolean (true/false)", o->name, v);
			return -1;
		}
		*(int *)(void *)(base + o->off) = b;
		return 0;
	case CFG_ENUM:
		if (!enum_ok(o->choices, v)) {
			snprintf(errstr, errstr_size, "%s: \"%s\" is not one of %s",
			    o->name, v, o->choices);
			return -1;
		}
		/* FALLTHROUGH */
	case CFG_STR:
		if ((dup = strdup(v)) == NULL) {
			snprintf(errstr, errstr_size, "%s: out of memory", o->name);
			return -1;
		}
		free(*(char **)(void *)(base + o->off));
		*(char **)(void *)(base + o->off) = dup;
		return 0;
	}
	return -1;
}

int
cfg_set(const struct cfg_prog *prog, void *conf, const char *name,
        const char *value, char *errstr, size_t errstr_size)
{
	const struct cfg_opt *o = find_opt(prog, name);

	if (o == NULL) {
		snprintf(errstr, errstr_size, "unknown setting \"%s\"", name);
		return -1;
	}
	return set_opt(o, conf, value, errstr, errstr_size);
}

void
cfg_free(const struct cfg_prog *prog, void *conf)
{
	char *base = conf;

	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++)
		if (o->type == CFG_STR || o->type == CFG_ENUM)
			free(*(char **)(void *)(base + o->off));
	memset(conf, 0, prog->conf_size);
}

static char *
trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Where an unquoted value's comment starts: a '#' first in the value or
 * after a space or tab. NULL when there is none. */
static char *
comment_start(char *v)
{
	for (char *p = v; *p != '\0'; p++)
		if (*p == '#' && (p == v || p[-1] == ' ' || p[-1] == '\t'))
			return p;
	return NULL;
}

/* Parses one "name = value" line in place. A value may be quoted ("...",
 * to keep a '#' or outer spaces); a '#' that starts the value or follows a
 * space or tab begins a comment, as does one after a quoted value's closing
 * quote. Returns 1 for a setting, 0 for a blank or comment line, -1 with
 * errstr for a syntax error. */
static int
parse_line(char *line, char **name, char **value, char *errstr, size_t errstr_size)
{
	char *eq, *v, *hash;

	line = trim(line);
	if (*line == '\0' || *line == '#')
		return 0;
	if ((eq = strchr(line, '=')) == NULL) {
		snprintf(errstr, errstr_size, "expected \"name = value\"");
		return -1;
	}
	*eq = '\0';
	*name = trim(line);
	v = trim(eq + 1);
	if (*v == '"') {
		char *q, *rest = NULL;

		/* the closing quote: the first one followed by nothing but
		 * blanks, or blanks and a comment */
		for (q = strchr(v + 1, '"'); q != NULL; q = strchr(q + 1, '"')) {
			rest = q + 1;
			while (*rest == ' ' || *rest == '\t')
				rest++;
			if (*rest == '\0' || *rest == '#')
				break;
		}
		if (q == NULL) {
			snprintf(errstr, errstr_size, strchr(v + 1, '"') != NULL ?
			    "text after the quoted value (only blanks or a # comment may follow)" :
			    "unterminated quoted value");
			return -1;
		}
		*q = '\0';
		v++;
	} else {
		if ((hash = comment_start(v)) != NULL)
			*hash = '\0';
		v = trim(v);
	}
	if (**name == '\0') {
		snprintf(errstr, errstr_size, "missing setting name");
		return -1;
	}
	*value = v;
	return 1;
}

static int
load_file(const struct cfg_prog *prog, void *conf, const char *path,
          char *errstr, size_t errstr_size)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *name, *value, why[512];
	const struct cfg_opt *o;
	size_t cap = 0, nopts = 0;
	ssize_t len;
	int lineno = 0, rc = 0, r, *seen;

	if (f == NULL) {
		snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (prog->tab[nopts].name != NULL)
		nopts++;
	if ((seen = calloc(nopts + 1, sizeof(*seen))) == NULL) { /* line of each setting */
		snprintf(errstr, errstr_size, "%s: out of memory", path);
		fclose(f);
		return -1;
	}
	while ((len = getline(&line, &cap, f)) != -1) {
		lineno++;
		if (memchr(line, '\0', (size_t)len) != NULL) {
			/* the parse would stop there, taking "5\0junk" for 5 */
			snprintf(errstr, errstr_size, "%s:%d: a NUL byte in the line", path, lineno);
			rc = -1;
			break;
		}
		r = parse_line(line, &name, &value, why, sizeof(why));
		if (r == 0)
			continue;
		/* a second line for a setting is a mistake, not an override:
		 * which of the two was meant is unknowable (an unknown name is
		 * cfg_set's to report) */
		o = r > 0 ? find_opt(prog, name) : NULL;
		if (o != NULL && seen[o - prog->tab] > 0) {
			snprintf(why, sizeof(why), "%s is set twice (first on line %d)", name,
			    seen[o - prog->tab]);
			r = -1;
		} else if (o != NULL) {
			seen[o - prog->tab] = lineno;
		}
		if (r > 0)
			r = cfg_set(prog, conf, name, value, why, sizeof(why));
		if (r < 0) {
			snprintf(errstr, errstr_size, "%s:%d: %s", path, lineno, why);
			rc = -1;
			break;
		}
	}
	/* getline also ends at a read error (the path is a directory, EIO):
	 * that is not an empty file */
	if (rc == 0 && ferror(f)) {
		snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
		rc = -1;
	}
	free(line);
	free(seen);
	fclose(f);
	return rc;
}

static int
load_env(const struct cfg_prog *prog, void *conf, char *errstr, size_t errstr_size)
{
	char var[128], why[512];
	const char *v;

	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++) {
		size_t n = (size_t)snprintf(var, sizeof(var), "%s%s", prog->env_prefix, o->name);

		for (size_t i = strlen(prog->env_prefix); i < n && i < sizeof(var); i++)
			var[i] = (char)toupper((unsigned char)var[i]);
		if ((v = getenv(var)) == NULL)
			continue;
		if (set_opt(o, conf, v, why, sizeof(why)) < 0) {
			snprintf(errstr, errstr_size, "environment %s: %s", var, why);
			return -1;
		}
	}
	return 0;
}

int
cfg_load(const struct cfg_prog *prog, void *conf, const char *path,
         char *errstr, size_t errstr_size)
{
	memset(conf, 0, prog->conf_size);
	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++) {
		if (set_opt(o, conf, o->def ? o->def : (o->type == CFG_INT ? "0" : o->type == CFG_BOOL ? "false" : ""),
		    errstr, errstr_size) < 0) {
			cfg_free(prog, conf);
			return -1;
		}
	}
	if ((path != NULL && load_file(prog, conf, path, errstr, errstr_size) < 0) ||
	    load_env(prog, conf, errstr, errstr_size) < 0) {
		cfg_free(prog, conf);
		return -1;
	}
	return 0;
}

static int
field_equal(const struct cfg_opt *o, const void *a, const void *b)
{
	const char *pa = (const char *)a + o->off, *pb = (const char *)b + o->off;

	switch (o->type) {
	case CFG_INT:
		return *(const long long *)(const void *)pa == *(const long long *)(const void *)pb;
	case CFG_BOOL:
		return *(const int *)(const void *)pa == *(const int *)(const void *)pb;
	default:
		return strcmp(*(char *const *)(const void *)pa, *(char *const *)(const void *)pb) == 0;
	}
}

int
cfg_apply_reload(const struct cfg_prog *prog, void *dst, const void *src)
{
	char why[256];
	int changed = 0;

	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++) {
		const char *ps = (const char *)src + o->off;

		if (field_equal(o, dst, src))
			continue;
		if (!o->reload) {
			log_warnx("config: %s changed; it takes effect only after a restart",
			    o->name);
			continue;
		}
		changed++;
		switch (o->type) {
		case CFG_INT:
			*(long long *)(void *)((char *)dst + o->off) = *(const long long *)(const void *)ps;
			break;
		case CFG_BOOL:
			*(int *)(void *)((char *)dst + o->off) = *(const int *)(const void *)ps;
			break;
		default:
			if (set_opt(o, dst, *(char *const *)(const void *)ps, why, sizeof(why)) < 0)
				log_warnx("config: %s", why);
			break;
		}
		log_info("config: %s reloaded", o->name);
	}
	return changed;
}

static const char *
type_name(const struct cfg_opt *o)
{
	switch (o->type) {
	case CFG_INT: return "int";
	case CFG_BOOL: return "bool";
	case CFG_ENUM: return "enum";
	default: return "string";
	}
}

void
cfg_usage(const struct cfg_prog *prog, FILE *f)
{
	fprintf(f,
	    "usage: %s [-c FILE] [-o name=value]... [--check-config] [--config-names] [--help]\n"
	    "%s\n\n"
	    "  -c, --config FILE   read settings from FILE (\"name = value\" lines, # comments);\n"
	    "                      also taken from %sCONFIG\n"
	    "  -o, --set N=V       set one setting (after file and environment)\n"
	    "      --check-config  validate the configuration, print \"configuration OK\" and exit\n"
	    "      --config-names  print the setting names, one per line, and exit\n"
	    "  -h, --help          this text\n\n"
	    "Settings (environment: %sNAME in upper case; [r] = reloaded on SIGHUP):\n",
	    prog->name, prog->summary, prog->env_prefix, prog->env_prefix);
	for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++) {
		fprintf(f, "  %-24s %-6s default=%s", o->name, type_name(o),
		    o->def && *o->def ? o->def : "\"\"");
		if (o->type == CFG_INT)
			fprintf(f, " range=[%lld,%lld]", o->min, o->max);
		if (o->type == CFG_ENUM)
			fprintf(f, " one of %s", o->choices);
		fprintf(f, "%s\n      %s\n", o->reload ? " [r]" : "", o->help);
	}
}

/* Applies the -o/--set name=value arguments of argv (argv[i] is restored). */
static int
apply_overrides(const struct cfg_prog *prog, void *conf, int argc, char **argv,
                char *errstr, size_t errstr_size)
{
	char why[512];

	for (int i = 1; i < argc; i++) {
		char *eq;
		int r;

		if (strcmp(argv[i], "-o") != 0 && strcmp(argv[i], "--set") != 0) {
			if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0)
				i++;
			continue;
		}
		if (++i >= argc) {
			snprintf(errstr, errstr_size, "%s needs an argument", argv[i - 1]);
			return -1;
		}
		if ((eq = strchr(argv[i], '=')) == NULL) {
			snprintf(errstr, errstr_size, "-o %s: expected name=value", argv[i]);
			return -1;
		}
		*eq = '\0';
		r = cfg_set(prog, conf, argv[i], eq + 1, why, sizeof(why));
		*eq = '=';
		if (r < 0) {
			snprintf(errstr, errstr_size, "-o %s: %s", argv[i], why);
			return -1;
		}
	}
	return 0;
}

int
cfg_reload(const struct cfg_prog *prog, void *conf, const char *path, int argc, char **argv,
           char *errstr, size_t errstr_size)
{
	void *fresh = calloc(1, prog->conf_size);
	int changed;

	if (fresh == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		log_warnx("config: reload failed, keeping the running configuration: %s", errstr);
		return -1;
	}
	if (cfg_load(prog, fresh, path, errstr, errstr_size) < 0) {
		free(fresh);
		log_warnx("config: reload failed, keeping the running configuration: %s", errstr);
		return -1;
	}
	if (apply_overrides(prog, fresh, argc, argv, errstr, errstr_size) < 0) {
		cfg_free(prog, fresh);
		free(fresh);
		log_warnx("config: reload failed, keeping the running configuration: %s", errstr);
		return -1;
	}
	changed = cfg_apply_reload(prog, conf, fresh);
	cfg_free(prog, fresh);
	free(fresh);
	log_info("config: reloaded from %s: %d setting(s) changed", path ? path : "environment",
	    changed);
	return changed;
}

int
cfg_from_args(const struct cfg_prog *prog, void *conf, int argc, char **argv,
              enum cfg_action *action, const char **config_path,
              char *errstr, size_t errstr_size)
{
	const char *path = NULL;
	char envname[128];
	int check = 0;

	*action = CFG_RUN;
	snprintf(envname, sizeof(envname), "%sCONFIG", prog->env_prefix);
	path = getenv(envname);
	if (path != NULL && *path == '\0')
		path = NULL;
	/* First pass: flags that decide what to do and which file to read. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			cfg_usage(prog, stdout);
			*action = CFG_EXIT_OK;
			return 0;
		} else if (strcmp(a, "--config-names") == 0) {
			for (const struct cfg_opt *o = prog->tab; o->name != NULL; o++)
				printf("%s\n", o->name);
			*action = CFG_EXIT_OK;
			return 0;
		} else if (strcmp(a, "--check-config") == 0) {
			check = 1;
		} else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0 ||
		    strcmp(a, "-o") == 0 || strcmp(a, "--set") == 0) {
			if (i + 1 >= argc) {
				snprintf(errstr, errstr_size, "%s needs an argument", a);
				return -1;
			}
			if (a[1] == 'c' || a[2] == 'c')
				path = argv[i + 1];
			i++;
		} else {
			snprintf(errstr, errstr_size, "unknown argument \"%s\" (see --help)", a);
			return -1;
		}
	}
	if (cfg_load(prog, conf, path, errstr, errstr_size) < 0)
		return -1;
	if (apply_overrides(prog, conf, argc, argv, errstr, errstr_size) < 0) {
		cfg_free(prog, conf);
		return -1;
	}
	if (config_path != NULL)
		*config_path = path;
	if (check) {
		printf("configuration OK\n");
		cfg_free(prog, conf);
		*action = CFG_EXIT_OK;
	}
	return 0;
}
