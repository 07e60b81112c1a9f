/* config.h - one table per program (name, type, default, bounds) loaded from
 * defaults, then a "name = value" file, then LINKPULSE_* environment, then
 * command-line -o name=value. Errors read "file:line: reason". */
#ifndef LP_CONFIG_H
#define LP_CONFIG_H

#include <stddef.h>
#include <stdio.h>

enum cfg_type {
	CFG_STR,  /* char * in the struct, owned by it (freed by cfg_free) */
	CFG_INT,  /* long long, within [min, max] */
	CFG_BOOL, /* int, 0 or 1; accepts true/false/yes/no/on/off/1/0 */
	CFG_ENUM, /* char * like CFG_STR, one of choices "a|b|c" */
};

struct cfg_opt {
	const char *name;    /* lower_snake_case; env var is PREFIX + upper case */
	enum cfg_type type;
	const char *def;     /* default as text; NULL means empty string / 0 */
	long long min, max;  /* CFG_INT bounds, inclusive */
	const char *choices; /* CFG_ENUM: "a|b|c" */
	size_t off;          /* offsetof() the field in the program's struct */
	int reload;          /* 1 when SIGHUP may change it at run time */
	const char *help;
};

/* A program's table; tab ends with an entry whose name is NULL. */
struct cfg_prog {
	const char *name;       /* program name, for --help */
	const char *summary;    /* one line for --help */
	const char *env_prefix; /* "LINKPULSE_" */
	const struct cfg_opt *tab;
	size_t conf_size;       /* sizeof the program's struct */
};

enum cfg_action { CFG_RUN, CFG_EXIT_OK };

#define CFG_END { NULL, CFG_STR, NULL, 0, 0, NULL, 0, 0, NULL }

/* Fills conf from defaults, file, environment and arguments. Handles
 * --help, --check-config and --config-names itself (prints, returns 0 with
 * *action = CFG_EXIT_OK). *config_path receives the file used (pointer into
 * argv or environ, or NULL), for SIGHUP reloads. Returns -1 with errstr on a
 * bad value or argument; conf then holds nothing that needs freeing. */
int cfg_from_args(const struct cfg_prog *prog, void *conf, int argc, char **argv,
                  enum cfg_action *action, const char **config_path,
                  char *errstr, size_t errstr_size);

/* Loads defaults, then path (may be NULL), then environment into conf.
 * On failure conf is freed and errstr says "file:line: reason". */
int cfg_load(const struct cfg_prog *prog, void *conf, const char *path,
             char *errstr, size_t errstr_size);

/* Sets one value by name (text form), validating type and bounds. */
int cfg_set(const struct cfg_prog *prog, void *conf, const char *name,
            const char *value, char *errstr, size_t errstr_size);

/* Copies fields marked reload from src into dst (both loaded), freeing the
 * old strings of dst. Returns the number of fields that changed; when a
 * non-reloadable field differs its name is logged as needing a restart. */
int cfg_apply_reload(const struct cfg_prog *prog, void *dst, const void *src);

/* SIGHUP reload. Reads defaults, path (may be NULL), the environment and
 * the -o/--set arguments of argv (the argc/argv given to cfg_from_args; 0 and
 * NULL for none) into a fresh copy and validates all of it. When it is good,
 * applies only the options marked reload to conf (cfg_apply_reload: changes
 * logged, a changed non-reloadable option logged as needing a restart) and
 * returns how many changed. When it is bad, conf is left as it was, the
 * reason is logged and -1 returns with errstr ("file:line: reason").
 * Run it on the thread that owns conf; other threads must not be reading
 * the reloadable fields of conf meanwhile. */
int cfg_reload(const struct cfg_prog *prog, void *conf, const char *path, int argc, char **argv,
               char *errstr, size_t errstr_size);

/* Frees the strings conf owns and zeroes it. */
void cfg_free(const struct cfg_prog *prog, void *conf);

/* Prints the settings table (name, type, default, bounds, help). */
void cfg_usage(const struct cfg_prog *prog, FILE *f);

#endif
