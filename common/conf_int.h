/*
 * conf_int.h - shared by conf.c and conf_keys.c only (not installed, not for
 * other callers: they use conf.h).
 */
#ifndef STAGEHAND_CONF_INT_H
#define STAGEHAND_CONF_INT_H

#include <stddef.h>

#include "conf.h"

/* One key: its name as written in stagehand.conf and its handler (0, or -1
   with the reason in why). */
struct _key {
	const char *name;
	int (*set)(struct conf *c, const char *val, char *why, size_t whylen);
};

/* The key table; conf.key_line[i] belongs to conf__keys[i]. */
extern const struct _key *const conf__keys;
extern const size_t conf__nkeys;

int conf__set_str(char **dst, const char *val, char *why, size_t whylen);
/* A comma/blank separated list (lower: fold to lower case); NULL-terminated. */
char **conf__split(const char *val, int lower);
void conf__free_list(char **l);

#endif /* STAGEHAND_CONF_INT_H */
