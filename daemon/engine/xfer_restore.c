/*
 * xfer_restore.c - a stage-in of an archive copy stagehand made: the job
 * gets the archived files, not the tar bundles and the index, and each file
 * is checked against the checksum recorded when it was archived (the
 * bundle index's, or the daemon's record of a plain copy, ctx->archive).
 * The restore itself is common/restore.c, the one 'stagehand restore' runs.
 *
 * Runs in a worker that has dropped to the job's owner: a user who cannot
 * read the archive gets the kernel's refusal, never the data. The index and
 * bundles are hostile input (restore.h); the destination is opened as the
 * local endpoint opens it (xfer_local_open_dest_*), and nothing is written
 * outside it.
 *
 * Must never: touch the database (the records go to the daemon), or fall
 * back to copying the raw archive once it has been recognised as one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "log.h"
#include "restore.h"
#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_util.h"

struct _run {
	struct xfer_ctx *ctx;
	int64_t started;
	char first[700];             /* the first failure, for the request's error */
};

static void _on_error(void *arg, const char *rel, const char *msg)
{
	struct _run *u = arg;

	if (!u->first[0])
		snprintf(u->first, sizeof(u->first), "%s", msg);
	xfer_emit(u->ctx, &(struct xfer_note){
		.type = XR_ITEM_FAILED, .code = EIO, .path = rel ? rel : "", .text = msg });
}

static void _on_skip(void *arg, const char *rel, const char *why)
{
	struct _run *u = arg;

	xfer_emit(u->ctx, &(struct xfer_note){ .type = XR_ITEM_SKIPPED, .path = rel, .text = why });
}

static void _on_file(void *arg, const char *out, int64_t size, int64_t mtime_ns, uint32_t mode,
		     const char *cks)
{
	struct _run *u = arg;

	/* The checksum is the one recorded at archive time, which the copy matched. */
	xfer_emit(u->ctx, &(struct xfer_note){
		.type = XR_ITEM_FILE, .path = out, .a = size, .b = mtime_ns, .c = (int)mode,
		.d = u->started, .e = (int64_t)time(NULL), .cks = cks, .cks2 = cks });
}

/*
 * The archive root and the source's place in it: the daemon's record, or
 * the source itself when it holds a bundle index. 1 with *afd (owned) and
 * *rel (into ctx->source), 0 when the source is no archive copy, -1 with
 * msg (the archive cannot be opened as the owner).
 */
static int _find(struct xfer_ctx *ctx, int *afd, const char **rel, const char **root,
		 char *msg, size_t msglen)
{
	char why[512];
	struct stat st;
	int fd;

	*rel = "";
	*root = ctx->source;
	if (ctx->archive) {
		size_t n = strlen(ctx->archive->root);

		*root = ctx->archive->root;
		*rel = ctx->source + n;
		while (**rel == '/')
			(*rel)++;
	}
	fd = xfer_open_beneath(ctx->beneath ? ctx->beneath : "/", *root, O_RDONLY | O_DIRECTORY,
			       why, sizeof(why));
	if (fd < 0) {
		if (errno == ENOTDIR || (!ctx->archive && errno == ENOENT))
			return 0;	/* a single archived file, or nothing: copied as usual */
		snprintf(msg, msglen, "cannot open the archive copy %s as uid %u: %s%s", *root,
			 (unsigned)ctx->uid, why, errno == EACCES || errno == EPERM ?
			 " (it is not yours, or not shared with you: ask its owner to make it "
			 "readable to you, or stage your own archive)" : "");
		return -1;
	}
	if (!ctx->archive && (fstatat(fd, BUNDLE_DIR "/" BUNDLE_INDEX_NAME, &st,
				      AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		return 0;
	}
	if (**rel && bundle_unsafe_name(*rel)) {
		snprintf(msg, msglen, "%s: not a plain path inside the archive copy %s",
			 ctx->source, *root);
		close(fd);
		return -1;
	}
	*afd = fd;
	return 1;
}

/*
 * Where the selection goes: a tree into ctx->dest (made when missing), a
 * file to ctx->dest (or into it, when it is a directory). 0 or -1 with msg.
 */
static int _dest(struct xfer_ctx *ctx, struct restore *r, enum restore_kind k, const char *rel,
		 char *name, size_t namelen, char *msg, size_t msglen)
{
	struct xfer_root root = { .dir = -1 };

	if (k == RESTORE_DIR) {
		r->dfd = xfer_local_open_dest_tree(ctx->dest, msg, msglen);
		r->rename = *rel ? "" : NULL;
		return r->dfd < 0 ? -1 : 0;
	}
	if (xfer_local_open_dest_file(ctx->dest, strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel,
				      &root, msg, msglen) < 0)
		return -1;
	snprintf(name, namelen, "%s", root.name);
	r->dfd = root.dir;
	r->rename = name;
	return 0;
}

int xfer_restore_stage_in(struct xfer_ctx *ctx)
{
	struct _run u = { .ctx = ctx, .started = (int64_t)time(NULL) };
	struct restore r;
	char msg[XFER_TEXT_MAX], name[NAME_MAX + 1];
	char *files[1];
	const char *rel, *root;
	enum restore_kind k;
	int afd = -1, rc, res = XFER_FINAL;

	if (strcmp(ctx->action, "stage_in") != 0 || ctx->source[0] != '/' || !ctx->dest)
		return -1;
	msg[0] = '\0';
	rc = _find(ctx, &afd, &rel, &root, msg, sizeof(msg));
	if (rc == 0)
		return -1;
	restore_init(&r);
	r.archive = root;
	r.dest = ctx->dest;
	r.afd = afd;
	r.force = 1;	/* a retry replaces what an earlier attempt put there */
	r.on_error = _on_error;
	r.on_skip = _on_skip;
	r.on_file = _on_file;
	r.arg = &u;
	if (rc < 0)
		goto out;
	rc = restore_open(&r);
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "%s", u.first);
		goto out;
	}
	if (rc == 0 && !ctx->archive) {
		snprintf(msg, sizeof(msg), "%s is not an archive copy stagehand made", root);
		goto out;
	}
	if (rc == 0) {
		r.known = ctx->archive->known;
		r.nknown = ctx->archive->nknown;
	}
	k = restore_kind(&r, rel);
	if (k != RESTORE_DIR && k != RESTORE_FILE) {
		snprintf(msg, sizeof(msg), "%s is %s the archive copy %s", rel, k == RESTORE_NONE ?
			 "not in" : "neither a file nor a directory in", root);
		goto out;
	}
	if (*rel) {
		files[0] = (char *)rel;
		r.files = files;
		r.nfiles = 1;
	}
	if (_dest(ctx, &r, k, rel, name, sizeof(name), msg, sizeof(msg)) < 0)
		goto out;
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: %s lies in the archive copy %s (%s): its "
		  "files come back verified against their archive-time checksums",
		  (long long)ctx->request_id, ctx->source, root, rc ? "bundled" : "plain");
	restore_run(&r);
	xfer_emit(ctx, &(struct xfer_note){
		.type = XR_TOTALS, .a = r.restored_files + r.errors, .b = r.bytes,
		.c = r.skipped });
	if (r.errors) {
		snprintf(msg, sizeof(msg), "%ld archived file%s of %s failed verification or could "
			 "not be read; first: %s. Repair or replace the archive copy, or stage "
			 "from another one", r.errors, r.errors == 1 ? "" : "s", ctx->source,
			 u.first);
	} else {
		res = XFER_OK;
		snprintf(msg, sizeof(msg), "%ld file%s (%lld bytes) restored from the archive copy "
			 "%s, each verified against the checksum recorded when it was archived",
			 r.restored_files, r.restored_files == 1 ? "" : "s", r.bytes, root);
	}
out:
	if (res != XFER_OK) {
		char full[XFER_TEXT_MAX];

		/* A request made through the API has no job: it is named instead. */
		snprintf(full, sizeof(full), "%s %lld: stage-in from the archive: %s",
			 ctx->job_id > 0 ? "job" : "request",
			 (long long)(ctx->job_id > 0 ? ctx->job_id : ctx->request_id),
			 msg[0] ? msg : "failed");
		snprintf(msg, sizeof(msg), "%s", full);
	}
	xfer_emit(ctx, &(struct xfer_note){ .type = XR_RESULT, .code = res, .text = msg });
	restore_free(&r);
	if (r.dfd >= 0)
		close(r.dfd);
	if (afd >= 0)
		close(afd);
	return res;
}
