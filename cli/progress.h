/*
 * progress.h - how the CLI shows requests: sizes, a table, and live
 * progress bars redrawn in place on a terminal.
 *
 * Owns: formatting only. Must never: talk to the daemon or exit.
 */
#ifndef STAGEHAND_CLI_PROGRESS_H
#define STAGEHAND_CLI_PROGRESS_H

#include <stdio.h>
#include <jansson.h>

/* "1.5 GiB", "812 B" into buf; returns buf. */
char *progress_fmt_bytes(double bytes, char *buf, size_t len);

/* Request state helpers (state names from docs/api.md). */
int progress_state_terminal(const char *state);	/* done, failed_final, cancelled */

/* Print a header and one row per request of the JSON array. */
void progress_print_table(FILE *fp, json_t *requests, int show_uid);

struct progress;

/* A live display on fp (a terminal). New object, free with progress_free. */
struct progress *progress_new(FILE *fp);
void progress_free(struct progress *p);

/*
 * Redraw one bar per request of the array (borrowed) in place, with files,
 * bytes, rate and ETA computed across calls; now is a monotonic time in
 * seconds.
 */
void progress_draw(struct progress *p, json_t *requests, double now);

#endif /* STAGEHAND_CLI_PROGRESS_H */
