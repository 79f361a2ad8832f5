/*
 * conf_int.h - shared by conf.c and conf_keys.c only (not installed, not for
 * other callers: they use conf.h).
 *
 * The keys themselves are data: lua/stagehand_conf.lua lists each one once
 * (name, kind, struct field, limits, default, doc) and the build turns it
 * into conf_keys_tab.h (common/conf_keys_gen.lua). Code here knows kinds of
 * value, never a key by name, except for checks across keys (conf.c).
 */
#ifndef STAGEHAND_CONF_INT_H
#define STAGEHAND_CONF_INT_H

#include <stddef.h>
#include <stdint.h>

#include "conf.h"

/* How a value is read; one handler each in conf_keys.c (see the table's
   header comment for what each accepts). */
enum conf__kind {
	CK_INT, CK_ENUM, CK_WORD, CK_DURATION, CK_SIZE, CK_PATH, CK_SOCKPATH,
	CK_ROOTS, CK_NAMES, CK_SCHEMES, CK_UIDS, CK_HOSTPORT, CK_SERVER, CK_URL,
	CK_REGION, CK_ARGV, CK_PARTITION, CK_S3PREFIX, CK_NETS,
	CK_NKINDS
};

/* One word of an enum or word key; NULL-terminated arrays. */
struct conf__choice {
	const char *word;
	int value;		/* stored in the int field (enum) */
	int alias;		/* accepted, but not named in messages */
};

/* One key (a row of the generated table). */
struct conf__key {
	const char *name;	/* as written in stagehand.conf */
	enum conf__kind kind;
	size_t off, size;	/* the struct conf field: offset and width */
	size_t off2;		/* hostport: the port field */
	uint64_t min, max;	/* limits, in the value's unit */
	const char *def;	/* default as written in stagehand.conf; NULL = unset */
	const char *off_word;	/* the word that unsets it (or means off_value) */
	int off_value;		/* duration: what off_word stores */
	const char *must;	/* "KEY must be MUST, not 'VALUE'"; NULL = the kind's wording */
	int lua;		/* slurmctld's Lua module reads it too */
	const struct conf__choice *choices;
};

/* The key table; conf.key_line[i] belongs to conf__keys[i]. */
extern const struct conf__key *const conf__keys;
extern const size_t conf__nkeys;

/* Read val into k's field of c: 0, or -1 with the reason in why. */
int conf__set(struct conf *c, const struct conf__key *k, const char *val, char *why,
	      size_t whylen);
/* Free what k's field holds and zero it. */
void conf__clear(struct conf *c, const struct conf__key *k);

int conf__set_str(char **dst, const char *val, char *why, size_t whylen);

#endif /* STAGEHAND_CONF_INT_H */
