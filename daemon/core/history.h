/*
 * history.h - HistoryRetention and AuditRetention carried out: the main
 * loop's hook that removes, a bounded slice at a time, the per-file rows of
 * requests that finished long enough ago and the old audit rows
 * (queue_history.h says which rows, and which never).
 *
 * Owns: when to prune and how much a turn of the main loop may spend on it;
 * the log line that says what went.
 *
 * Must never: hold the main loop for more than a slice (HISTORY_SLICE_MS)
 * a turn; touch user files.
 */
#ifndef STAGEHAND_HISTORY_H
#define STAGEHAND_HISTORY_H

#include "lifecycle.h"

/* Rows a transaction removes at most, and the time one tick may take. */
#define HISTORY_BUDGET 2000
#define HISTORY_SLICE_MS 50
/* How often a daemon with nothing left to prune looks again. */
#define HISTORY_IDLE_MS 5000

extern const struct lifecycle_hook history_hook;

#endif /* STAGEHAND_HISTORY_H */
