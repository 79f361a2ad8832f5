/*
 * record.h - the one reader of a job's admin_comment record.
 *
 * Owns: where the parts of the record that job_submit.lua writes begin, and
 * what its markers say. The format (lua/stagehand.lua's comment above
 * _split_record, docs/directives.md "The plan"):
 *
 *   [SITE " "] ["stagehand:status=" STATUS " "]
 *   ["stagehand:hold=" WORD " "] "stagehand:v1:" PLAN-JSON
 *
 * The plan begins after the FIRST "stagehand:v1:" and runs to the end, so
 * everything after it is the user's (paths, URLs). A marker counts only
 * before the plan: a user's path that spells "stagehand:hold=pending" is
 * plan text, never a hold. The hold marker counts only when it is the last
 * thing before the plan (letters, then blanks); the status text is what
 * follows the first status marker of what is left. This is exactly
 * lua/stagehand.lua's _split_record: tests/vectors/record/ holds both to it.
 *
 * Must never: allocate, or look past the string it is given. Pure: the
 * daemon, the CLI and the SPANK plugin all read a record through it.
 */
#ifndef STAGEHAND_RECORD_H
#define STAGEHAND_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#define RECORD_PLAN_PREFIX "stagehand:v1:"
#define RECORD_HOLD_MARK "stagehand:hold="
#define RECORD_STATUS_MARK "stagehand:status="

/* The parts of one admin_comment. Every pointer borrows from the string split. */
struct record {
	const char *site;       /* site text: [site, site + site_len), trailing blanks left out */
	size_t site_len;
	const char *status;     /* stagehandd's status text (trailing blanks left out), or NULL */
	size_t status_len;
	const char *hold;       /* the hold marker's word ("pending", "released", ...), or NULL */
	size_t hold_len;
	const char *plan;       /* the plan JSON (to the end of the string), or NULL: no record */
	const char *rest;       /* where the hold marker, else the plan prefix, begins (the
				   end of the string when neither): what a rewrite of the
				   status keeps as it is */
};

/* The hold state of a record, as lua/stagehand.lua's record_state says it. */
enum record_state {
	RECORD_NONE_AT_ALL,     /* no record: no plan in admin_comment */
	RECORD_NO_HOLD,         /* a plan without a hold marker ("none") */
	RECORD_PENDING,         /* "stagehand:hold=pending": held for stage-in or after= */
	RECORD_RELEASED,        /* "stagehand:hold=released" */
	RECORD_OTHER_HOLD,      /* a hold marker with any other word */
};

/* Split ac (NULL or "" is no record) into *r. */
void record_split(const char *ac, struct record *r);

/* The hold state of ac. */
enum record_state record_state(const char *ac);

/* Is ac a record whose job waits (held by job_submit.lua) for stagehandd? */
bool record_hold_pending(const char *ac);

/* The plan JSON of ac (borrowed, to its end), or NULL. */
const char *record_plan(const char *ac);

#endif /* STAGEHAND_RECORD_H */
