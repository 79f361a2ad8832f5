/*
 * cleanup.h - the end of a job's staged inputs (docs/admin-guide.md,
 * "Staged inputs after the job").
 *
 * Owns, on the daemon's side (cleanup.c): at a job's end (hold mode) or
 * teardown (burst-buffer mode), labelling the job's scratch input directory
 * (ScratchRoots[0]/USER/JOB/input) 'purge' and storing a "purge" request
 * that lists the files stagehand staged there (from the stage_in requests'
 * verified items: path, size, mtime) and is not claimed before
 * InputRetention has passed. The schedule is a row in the queue, so a
 * restart loses nothing. On the worker's side (cleanup_run.c), once the
 * worker has become the job's owner: removing each listed file that is
 * still there, a regular file with the size and mtime it had when staged,
 * then the directories that are left empty, and saying what it left.
 *
 * Must never: remove anything as root or in the daemon process; follow a
 * symbolic link (every component is opened with O_NOFOLLOW from the one
 * before it, below the scratch root); remove a file it did not stage, or one
 * changed since; touch inputs staged with to= (they are the user's) or an
 * array's shared inputs.
 */
#ifndef STAGEHAND_CLEANUP_H
#define STAGEHAND_CLEANUP_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "queue.h"
#include "queue_cleanup.h"   /* the rows: struct cleanup_item, cleanup_counts */

struct xfer_ctx;

/*
 * Label the job's input directory 'purge' and schedule the removal of the
 * files stagehand staged into it, InputRetention from now (none with
 * InputRetention=never). Nothing when the job staged nothing there, or when
 * it was done already (a second teardown). *label_id and *purge_id get the
 * requests made (0: none). The caller holds d->conf_lock (read) or runs in
 * the main thread. 0, or -1 with err.
 */
int cleanup_schedule(struct daemon *d, const struct queue_job *j, int64_t *label_id,
		     int64_t *purge_id, char *err, size_t errlen);

/*
 * The job runs again after its end (queue_job_rerun) and its input
 * directory was labelled 'purge': label it 'exempt' again, as the owner, so
 * the site's purge leaves the inputs the rerun reads (its scheduled removal
 * was cancelled with the rerun; the final end schedules a new one). The
 * label request's id, 0 when the job has no input directory, or -1 with err.
 */
int64_t cleanup_rerun(struct daemon *d, const struct queue_job *j, char *err, size_t errlen);

/*
 * The job's scratch input directory into out: ScratchRoots[0]/USER/JOB/input.
 * 0, 1 when the site has no scratch root or the job no user, -1 too long.
 */
int cleanup_input_dir(const struct conf *c, const struct queue_job *j, char *out,
		      size_t outlen);

/*
 * Where a stage_in request's verified item lies, relative to the input
 * directory: dest is the request's destination, nitems how many items it
 * verified, rel the item's relpath. A single file's relpath is its own
 * name; a tree's items lie below dest. 0 with out set, 1 when dest is not
 * directly inside input (to=, shared inputs: not cleaned up), -1 too long.
 */
int cleanup_relpath(const char *input, const char *dest, size_t nitems, const char *rel,
		    char *out, size_t outlen);

/*
 * Worker side, as the owner: remove what ctx->done lists (relpaths below
 * ctx->source, each with the size and mtime it was staged with), opened
 * below ctx->beneath with no symlink followed. Emits one XR_ITEM_DONE
 * ("removed") or XR_ITEM_SKIPPED (why it stays) per entry, then XR_RESULT.
 * Returns enum xfer_result.
 */
int cleanup_run(struct xfer_ctx *ctx);

#endif /* STAGEHAND_CLEANUP_H */
