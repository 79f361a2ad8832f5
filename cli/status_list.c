/*
 * status_list.c - 'stagehand status' without an id: what needs the
 * caller's attention. After a job has ended Slurm refuses updates of its
 * record, so a failed archive or stage-out can only be told here (and by
 * the site's NotifyCommand); this list is where a user looks first.
 *
 * Owns: which requests the list asks for (unfinished ones, and those that
 * failed in the last N days; the caller's own, or an admin's view of every
 * user or of one), and how it prints them. The daemon decides who may see
 * what. Must never: decide admin rights itself (the daemon's answer to
 * /v1/health says whether the caller is an admin).
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "client_int.h"
#include "progress.h"

int status_list_path(char *buf, size_t len, const struct status_list *sl)
{
	const char *u = sl->user;

	/* A name or uid goes into the query as it is: keep it to what names are made of. */
	for (const char *p = u; p && *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._-", *p)) {
			client_errx("status: --user %s: not a user name or uid", u);
			return -1;
		}
	if (u && !*u) {
		client_errx("status: --user needs a user name or uid");
		return -1;
	}
	if (sl->all_states)
		return client_path_fmt(buf, len, "/v1/requests?%s%s", u ? "user=" : sl->admin ?
				       "all=1" : "", u ? u : "");
	return client_path_fmt(buf, len, "/v1/requests?attention=%d%s%s", sl->days,
			       u ? "&user=" : sl->admin ? "&all=1" : "", u ? u : "");
}

static int _failed(json_t *reqs)
{
	size_t i;
	json_t *r;

	json_array_foreach(reqs, i, r) {
		const char *s = json_string_value(json_object_get(r, "state"));

		if (s && !strncmp(s, "failed", 6))
			return 1;
	}
	return 0;
}

void status_list_print(json_t *resp, const struct status_list *sl)
{
	json_t *reqs = json_object_get(resp, "requests");
	int everyone = sl->admin && !sl->user;
	char whose[96];

	if (sl->user)
		snprintf(whose, sizeof(whose), "of %s", sl->user);
	else
		snprintf(whose, sizeof(whose), "%s", everyone ? "of every user" : "");
	if (sl->all_states)
		printf("%s%s, newest first:\n", *whose ? "Requests " : "Your requests", whose);
	else if (json_array_size(reqs) == 0) {
		printf("No transfer %s is unfinished or failed in the last %d day%s ('stagehand "
		       "status --all' lists finished ones too)\n", *whose ? whose : "of yours",
		       sl->days, sl->days == 1 ? "" : "s");
		return;
	} else
		printf("%s%s not finished yet, or failed in the last %d day%s:\n",
		       *whose ? "Transfers " : "Your transfers", whose, sl->days,
		       sl->days == 1 ? "" : "s");
	progress_print_table(stdout, reqs, everyone || sl->user);
	if (_failed(reqs))
		printf("A failed transfer is kept, its sources untouched: fix the cause (the "
		       "error above), then 'stagehand retry rN' or 'stagehand retry JOB'.\n");
}
