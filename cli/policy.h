/*
 * policy.h - rule snippets for site policy engines (policy.c).
 *
 * Owns: the text of the GPFS, Robinhood, DMF and Lustre HSM exports.
 * Must never: write a label or touch the engines; it only prints.
 */
#ifndef STAGEHAND_CLI_POLICY_H
#define STAGEHAND_CLI_POLICY_H

#include <stddef.h>
#include <stdio.h>

enum { POLICY_HOLD = 0, POLICY_ARCHIVE = 1, POLICY_ARCHIVED = 2, POLICY_PURGE = 3,
       POLICY_EXEMPT = 4, POLICY_NKIND };

/* Labelled directories found under --paths-from, sorted. */
struct policy_paths {
	char **v[POLICY_NKIND];   /* hold (pending, skipped), archive, archived, purge (a
				     job's staged inputs after it), exempt; owned */
	size_t n[POLICY_NKIND];
	int errors;               /* unreadable paths during the walk */
};

struct policy_opts {
	const char *format;       /* gpfs, robinhood, dmf, lustre-hsm */
	const char *ns;           /* "user." or "trusted." */
	const char *paths_from;   /* absolute root or NULL */
	const char *pool;         /* gpfs external pool name */
	int archive_id;           /* lustre-hsm archive id */
	int hold_tag, archive_tag;  /* dmf site tags */
	const char *rbh_policies; /* robinhood: "posix" (policies defined in the export;
				     NULL means posix) or "lhsm" (Lustre HSM's) */
	const char *archive_cmd;  /* robinhood posix: the archiver run per file, or NULL
				     (common.log: the site fills it in) */
	int exempt_days;          /* robinhood: purge exempt files unchanged this long */
};

/* Walk root and fill p (free with policy_paths_free). 0 or -1 (printed). */
int policy_paths_scan(const char *root, const char *ns, struct policy_paths *p);
void policy_paths_free(struct policy_paths *p);

/*
 * Print the export for o->format to fp. Returns how many paths had to be
 * left out (characters the format cannot carry), or -1 for an unknown format.
 */
int policy_export(FILE *fp, const struct policy_opts *o, const struct policy_paths *p);

#endif /* STAGEHAND_CLI_POLICY_H */
