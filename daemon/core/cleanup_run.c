/*
 * cleanup_run.c - the worker's side of the input cleanup (cleanup.h): runs
 * in a worker that has become the job's owner, and removes what the daemon's
 * records say stagehand staged, nothing else.
 *
 * Every path's directory is opened below the input directory through the
 * one resolver (common/resolve.h, resolve_open: no link followed in any
 * component), and the input directory itself is opened below the scratch
 * root the same way (xfer_open_beneath): a symbolic link the user planted,
 * at any depth, ends the open there. The
 * final name is judged with fstatat(AT_SYMLINK_NOFOLLOW) and removed with
 * unlinkat on the directory descriptor that open returned, so the name is
 * only ever looked up in a directory opened without following a link.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "resolve.h"
#include "xfer.h"
#include "xfer_util.h"

/* A relpath the daemon wrote: relative, no empty, '.' or '..' component. */
static int _safe_rel(const char *rel)
{
	const char *p = rel;

	if (!*rel || *rel == '/' || strlen(rel) >= XFER_PATH_MAX)
		return 0;
	while (*p) {
		size_t n = strcspn(p, "/");

		if (n == 0 || n > NAME_MAX || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/' && !*++p)
			return 0;
	}
	return 1;
}

/*
 * Open the directory that holds rel's last component (dirs components deep
 * below root; all of them when dirs < 0), through the one resolver
 * (common/resolve.h: no link followed in any component, nothing above
 * root); *last points at that name in rel. A new descriptor, or -1 with
 * errno (ELOOP: a link on the way; ENOTDIR: a file; ENOENT: gone).
 */
static int _open_parent(int root, const char *rel, int dirs, const char **last)
{
	char parent[XFER_PATH_MAX];
	const char *p = rel;
	int depth = 0;

	for (;;) {
		size_t n = strcspn(p, "/");

		if (!p[n] || (dirs >= 0 && depth == dirs))
			break;
		p += n + 1;
		depth++;
	}
	*last = p;
	/* "" (the name is in root itself) reopens root. */
	if (snprintf(parent, sizeof(parent), "%.*s", p > rel ? (int)(p - rel - 1) : 0, rel) >=
	    (int)sizeof(parent)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return resolve_open(root, parent, O_RDONLY | O_DIRECTORY, 0, 0, NULL, 0);
}

/* Remove one staged file: 1 removed, 0 left (why says why). */
static int _remove_one(int root, const struct xfer_done_ent *e, char *why, size_t whylen)
{
	const char *name;
	struct stat st;
	int dir, rc = 0;

	if (!_safe_rel(e->relpath)) {
		snprintf(why, whylen, "not a path below the input directory: left alone");
		return 0;
	}
	dir = _open_parent(root, e->relpath, -1, &name);
	if (dir < 0) {
		if (errno == ENOENT)
			snprintf(why, whylen, "no longer there (moved or removed by the job)");
		else if (errno == ELOOP || errno == ENOTDIR)
			snprintf(why, whylen, "a directory on its path is now a symbolic link or a "
				 "file: not followed, left alone");
		else
			snprintf(why, whylen, "cannot open its directory: %s", strerror(errno));
		return 0;
	}
	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			snprintf(why, whylen, "no longer there (moved or removed by the job)");
		else
			snprintf(why, whylen, "cannot read it: %s", strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "no longer the staged file (now %s): left alone",
			 S_ISLNK(st.st_mode) ? "a symbolic link, not followed" :
			 S_ISDIR(st.st_mode) ? "a directory" : "a special file");
	} else if (st.st_size != e->size || xfer_ns(&st.st_mtim) != e->mtime_ns) {
		snprintf(why, whylen, "changed since it was staged (size or modification time): "
			 "left in place");
	} else if (unlinkat(dir, name, 0) < 0) {
		snprintf(why, whylen, "cannot remove it: %s", strerror(errno));
	} else {
		rc = 1;
	}
	close(dir);
	return rc;
}

/* rmdir rel's parent directories that are empty now, deepest first. */
static void _remove_empty_dirs(int root, const char *rel)
{
	int depth = 0;

	for (const char *p = rel; (p = strchr(p, '/')) != NULL; p++)
		depth++;
	for (int k = depth; k >= 1; k--) {
		const char *name;
		char comp[NAME_MAX + 1];
		size_t n;
		int dir = _open_parent(root, rel, k - 1, &name);

		if (dir < 0)
			return;
		n = strcspn(name, "/");
		memcpy(comp, name, n);
		comp[n] = '\0';
		/* Not empty (the job left something there) or gone: it stays, its parents too. */
		if (unlinkat(dir, comp, AT_REMOVEDIR) < 0 && errno != ENOENT) {
			close(dir);
			return;
		}
		close(dir);
	}
}

/* rmdir the input directory itself when nothing is left in it. 1 removed, 0 kept. */
static int _remove_input_dir(const struct xfer_ctx *ctx, char *why, size_t whylen)
{
	char parent[XFER_PATH_MAX];
	const char *slash = strrchr(ctx->source, '/');
	int pfd, rc = 0;

	if (!slash || slash == ctx->source ||
	    snprintf(parent, sizeof(parent), "%.*s", (int)(slash - ctx->source), ctx->source) >=
	    (int)sizeof(parent))
		return 0;
	pfd = xfer_open_beneath(ctx->beneath ? ctx->beneath : parent, parent,
				O_RDONLY | O_DIRECTORY, why, whylen);
	if (pfd < 0)
		return 0;
	if (unlinkat(pfd, slash + 1, AT_REMOVEDIR) == 0)
		rc = 1;
	else if (errno == ENOTEMPTY || errno == EEXIST)
		snprintf(why, whylen, "it holds files stagehand did not stage (or left): kept, "
			 "labelled purge");
	else
		snprintf(why, whylen, "%s", strerror(errno));
	close(pfd);
	return rc;
}

int cleanup_run(struct xfer_ctx *ctx)
{
	char why[1024], msg[XFER_TEXT_MAX];
	size_t removed = 0, left = 0;
	int64_t freed = 0;
	int root;

	root = xfer_open_beneath(ctx->beneath ? ctx->beneath : ctx->source, ctx->source,
				 O_RDONLY | O_DIRECTORY, why, sizeof(why));
	if (root < 0 && errno == ENOENT) {
		for (size_t i = 0; i < ctx->ndone; i++)
			xfer_emit(ctx, &(struct xfer_note){
				.type = XR_ITEM_SKIPPED, .path = ctx->done[i].relpath,
				.text = "no longer there (the input directory is gone)" });
		xfer_emit(ctx, &(struct xfer_note){
			.type = XR_RESULT, .code = XFER_OK,
			.text = "the input directory is gone already" });
		return XFER_OK;
	}
	if (root < 0) {
		snprintf(msg, sizeof(msg), "cannot open the input directory: %.900s", why);
		xfer_emit(ctx, &(struct xfer_note){
			.type = XR_RESULT,
			.code = xfer_err_final(errno) ? XFER_FINAL : XFER_RETRYABLE, .text = msg });
		return XFER_FINAL;
	}
	/* Label first: with InputRetention=0 no label request came before (cleanup.c). */
	xfer_label_all(ctx, root, "purge", NULL);
	for (size_t i = 0; i < ctx->ndone && !(ctx->stop && *ctx->stop); i++) {
		const struct xfer_done_ent *e = &ctx->done[i];

		if (_remove_one(root, e, why, sizeof(why))) {
			removed++;
			freed += e->size;
			xfer_emit(ctx, &(struct xfer_note){
				.type = XR_ITEM_DONE, .a = e->size, .path = e->relpath,
				.text = "removed" });
		} else {
			left++;
			xfer_emit(ctx, &(struct xfer_note){
				.type = XR_ITEM_SKIPPED, .path = e->relpath, .text = why });
		}
	}
	if (ctx->stop && *ctx->stop) {
		close(root);
		xfer_emit(ctx, &(struct xfer_note){
			.type = XR_RESULT, .code = XFER_INTERRUPTED, .text = "interrupted" });
		return XFER_INTERRUPTED;
	}
	/* Directories the staged trees brought, now empty (deepest paths first: sorted). */
	for (size_t i = ctx->ndone; i-- > 0;)
		if (_safe_rel(ctx->done[i].relpath))
			_remove_empty_dirs(root, ctx->done[i].relpath);
	close(root);
	why[0] = '\0';
	if (_remove_input_dir(ctx, why, sizeof(why)))
		snprintf(why, sizeof(why), "removed, it was empty");
	snprintf(msg, sizeof(msg), "removed %zu staged file%s (%lld bytes), left %zu; input "
		 "directory %s: %.600s", removed, removed == 1 ? "" : "s", (long long)freed, left,
		 ctx->source, why[0] ? why : "kept");
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: %s", (long long)ctx->request_id, msg);
	xfer_emit(ctx, &(struct xfer_note){ .type = XR_RESULT, .code = XFER_OK, .text = msg });
	return XFER_OK;
}
