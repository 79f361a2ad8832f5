/*
 * xfer_pipeline.c - the engine's driver: one request from a source endpoint
 * to a destination endpoint (xfer_endpoint.h).
 *
 * The order of a request: open the source, then (label requests: label and
 * stop) count what the listing holds (XR_TOTALS), open the destination, walk
 * the source's listing and for each entry decide (xfer_engine_want), then
 * copy: a regular file is opened for reading, written to a temporary file
 * through xfer_engine_write (xfer_engine_stream, or the big-file path of
 * xfer_big.c), committed (metadata, fsync, rename), read back from the
 * destination and its checksum compared with the source's; only then is it
 * reported, in one record, and with keep=no its source removed. Symlinks
 * are recreated as symlinks and read back; directories get their mode and
 * times once their entries are in place. Then the verdict: every file
 * counted was verified or kept, or the request is redone. A file to or
 * from a server (an endpoint that streams: put, fetch) is sent or fetched
 * by its endpoint instead and verified by the server's word.
 *
 * The copy threads and SyncMode=batch are xfer_pipeline_pool.c; a
 * destination that groups files (bundle) is xfer_pipeline_group.c.
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

#include "log.h"
#include "xfer_big.h"
#include "xfer_pipeline_int.h"
#include "xfer_util.h"

#define CHUNK (4u << 20)          /* the walker's buffer (single files, null endpoint) */

/* ---- one entry ---- */

int pipe__resume_ok(struct pipe__run *r, int ddir, const char *name, const char *rel,
		    const struct stat *st)
{
	enum xfer_want w = xfer_engine_want(r->ctx, rel, st->st_size, xfer_ns(&st->st_mtim));
	struct stat dst;

	if (w == XFER_WANT_OTHER) {
		xfer_tally_add(&r->t, &r->t.kept);
		return 1;
	}
	/* A grouping run's resume is the destination's own record (kept). */
	if (r->dst->discards || r->g.on || w != XFER_WANT_KEPT)
		return 0;
	/* A server keeps no mtime of ours (put): its size says it is still there. */
	if (r->dst->stat(r->dep, ddir, name, &dst) == 0 && S_ISREG(dst.st_mode) &&
	    dst.st_size == st->st_size &&
	    (r->dst->stream || xfer_ns(&dst.st_mtim) == xfer_ns(&st->st_mtim))) {
		xfer_tally_add(&r->t, &r->t.kept);
		return 1;
	}
	return 0;
}

/* keep=no: an archive's source file goes once its copy was verified; a failure is a warning. */
void pipe__remove_source(struct pipe__run *r, int sdir, const char *sname, const char *rel)
{
	int e;

	if (r->ctx->keep || strcmp(r->ctx->action, "archive") != 0 || r->dst->discards)
		return;
	if ((e = r->src->remove(r->sep, sdir, sname)) != 0)
		xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: keep=no: cannot remove source '%s': "
			  "%s", (long long)r->ctx->request_id, rel, strerror(e));
}

void pipe__report(struct pipe__run *r, const struct pipe__file *f, int64_t total,
		  int64_t started, const char *cks, const char *got)
{
	const struct stat *st = f->st;

	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_FILE, .path = f->rel, .a = total, .b = xfer_ns(&st->st_mtim),
		.c = (int)(st->st_mode & 07777), .d = started, .e = (int64_t)time(NULL), .cks = cks,
		.cks2 = got });
	xfer_tally_add(&r->t, &r->t.verified);
	pipe__remove_source(r, f->sdir, f->sname, f->rel);
}

/* The source file as listed, for reading; -1 after reporting why. */
static int _open_source_file(struct pipe__run *r, int sdir, const char *sname, const char *rel,
			     const struct stat *st, struct stat *cur)
{
	int sfd = r->src->open_read(r->sep, sdir, sname, st, cur), e;

	if (sfd < 0) {
		e = errno;
		xfer_fail(&r->t, rel, e, e == EAGAIN ? "source changed while walking" :
			  "cannot open source");
	}
	return sfd;
}

int pipe__transfer(struct pipe__run *r, const struct xfer_buf *tb, const struct pipe__file *f,
		   struct xfer_wfile *wf, int big, unsigned cflags, char *cks, char *got)
{
	int sdir = f->sdir;
	const char *sname = f->sname, *rel = f->rel;
	const struct stat *st = f->st;
	const char *what = "cannot create destination";
	struct stat cur;
	int sfd, e;

	if ((sfd = _open_source_file(r, sdir, sname, rel, st, &cur)) < 0)
		return -1;
	if ((e = r->dst->open_write(r->dep, wf, big ? XFER_W_VERIFY : 0, &what)) != 0) {
		close(sfd);
		xfer_fail(&r->t, rel, e, what);
		return -1;
	}
	if (wf->vfd >= 0) {
		/* A source about to be removed (keep=no) is always verified in full. */
		int sample = r->ctx->keep ? r->ctx->verify_sample : 0;
		struct xfer_big_job j = { sfd, wf->fd, wf->vfd, st->st_size, sample };

		e = xfer_big_copy(r->ctx, &j, &wf->total, cks, got);
	} else {
		e = xfer_engine_stream(r->ctx, tb, sfd, wf->fd, st->st_size, 0, &wf->total, cks);
		posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	}
	if (!e && wf->total != st->st_size)
		e = EAGAIN;	/* the source changed size while it was copied */
	if (!e)
		e = r->dst->commit(r->dep, wf, sfd, &cur, cflags);
	else if (r->dst->device)
		r->dst->device->abort(r->dep, wf);	/* null: there is no temporary file */
	close(sfd);
	if (e) {
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, e == EAGAIN ? "source changed during copy" :
				  "copy failed");
		return -1;
	}
	return 0;
}

/* ---- endpoints that stream (url) ---- */

/*
 * One regular file to a destination that streams (stream->put): the endpoint
 * sends the source as opened here and verifies it by the server's word,
 * which is what the record carries on both sides. Each upload shows while
 * it runs (XR_ITEM_START), as a big copy does.
 */
static void _put_file(struct pipe__run *r, int sdir, const char *sname, int ddir,
		      const char *name, const char *rel, const struct stat *st)
{
	struct xfer_stream out = { 0 };
	int64_t started = (int64_t)time(NULL);
	struct stat cur;
	int sfd, e;

	if (pipe__resume_ok(r, ddir, name, rel, st))
		return;
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_START, .a = st->st_size, .b = xfer_ns(&st->st_mtim),
		.c = (int64_t)(st->st_mode & 07777), .path = rel, .text = "file" });
	if ((sfd = _open_source_file(r, sdir, sname, rel, st, &cur)) < 0)
		return;
	e = r->dst->stream->put(r->dep, ddir, name, sfd, &cur, &out) < 0 ? -1 : 0;
	if (!e && (fstat(sfd, &cur) < 0 || cur.st_size != out.bytes ||
		   xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim)))
		e = EAGAIN;
	close(sfd);
	if (e == EAGAIN)
		xfer_fail(&r->t, rel, e, "source changed during copy");
	else if (e && !xfer_stopped(r->ctx))
		xfer_failf(&r->t, rel, out.final, "%s", out.why);
	else if (!e)
		pipe__report(r, &(struct pipe__file){ sdir, sname, rel, st }, out.bytes, started,
			     out.token, out.token);
}

/*
 * One regular file from a source that streams (stream->fetch): asked about
 * first (the listing has names and sizes only: the resume decision and the
 * record use what the server says now), fetched into a temporary file that
 * keeps a partial download across attempts, then made durable and read back
 * like any copy. The record carries the server's word (out.token).
 */
static void _fetch_file(struct pipe__run *r, const struct xfer_buf *tb, int sdir,
			const char *sname, int ddir, const char *name, const char *rel)
{
	struct xfer_wfile wf = { .dir = ddir, .name = name, .fd = -1, .vfd = -1 };
	const char *what = "cannot create destination";
	struct xfer_stream out = { 0 };
	int64_t started = (int64_t)time(NULL);
	char got[CKSUM_HEX_MAX];
	struct stat st;
	int e;

	if ((e = r->src->stat(r->sep, sdir, sname, &st)) != 0) {
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, "cannot stat");
		return;
	}
	if (pipe__resume_ok(r, ddir, name, rel, &st))
		return;
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_START, .a = st.st_size, .b = xfer_ns(&st.st_mtim),
		.c = (int64_t)(st.st_mode & 07777), .path = rel, .text = "file" });
	if ((e = r->dst->open_write(r->dep, &wf, XFER_W_RESUME, &what)) != 0) {
		xfer_fail(&r->t, rel, e, what);
		return;
	}
	if (r->src->stream->fetch(r->sep, sdir, sname, wf.fd, &out) < 0) {
		if (out.keep)
			close(wf.fd);	/* the next attempt resumes from it */
		else
			r->dst->device->abort(r->dep, &wf);
		if (!xfer_stopped(r->ctx))
			xfer_failf(&r->t, rel, out.final, "%s", out.why);
		return;
	}
	wf.total = out.bytes;
	if ((e = r->dst->commit(r->dep, &wf, -1, &st, 0)) == 0)
		e = r->dst->device->readback(r->dep, tb, ddir, name, wf.total, got);
	if (!e && strcmp(got, out.cks) != 0)
		e = EIO;
	if (e && e != EINTR)
		xfer_fail(&r->t, rel, e, e == EIO ? "checksum mismatch after copy of" :
			  "cannot store");
	if (!e)
		pipe__report(r, &(struct pipe__file){ sdir, sname, rel, &st }, wf.total, started,
			     out.token, out.token);
}

/*
 * One regular file: temporary file, data, metadata, fsync, rename, then
 * read back and compare; reported in one record once all of that holds. For
 * archive with keep=no the source goes only after this verification.
 */
void pipe__copy_file(struct pipe__run *r, const struct xfer_buf *tb, int sdir,
		     const char *sname, int ddir, const char *name, const char *rel,
		     const struct stat *st)
{
	char cks[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct xfer_wfile wf = { .dir = ddir, .name = name, .fd = -1, .vfd = -1 };
	int big = !r->dst->discards && st->st_size >= XFER_BIG_MIN, e;
	int64_t started = (int64_t)time(NULL);
	const struct pipe__file f = { sdir, sname, rel, st };

	if (r->dst->stream || r->src->stream) {
		if (r->dst->stream)
			_put_file(r, sdir, sname, ddir, name, rel, st);
		else
			_fetch_file(r, tb, sdir, sname, ddir, name, rel);
		return;
	}
	if (pipe__resume_ok(r, ddir, name, rel, st))
		return;
	/* Small files are reported once, when verified; a big one shows while it runs. */
	if (big)
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_START, .a = st->st_size, .b = xfer_ns(&st->st_mtim),
			.c = (int64_t)(st->st_mode & 07777), .path = rel, .text = "file" });
	if (pipe__transfer(r, tb, &f, &wf, big, 0, cks, got) < 0)
		return;
	/* The big path read the destination back while it wrote it. */
	if (r->dst->discards)
		snprintf(got, sizeof(got), "%s", cks);
	else if (!big &&
		 (e = r->dst->device->readback(r->dep, tb, ddir, name, wf.total, got)) != 0) {
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, cks) != 0) {
		xfer_fail(&r->t, rel, EIO, "checksum mismatch after copy of");
		return;
	}
	if (r->dst->group && (e = r->dst->group->record(r->dep, rel, st, got)) != 0) {
		xfer_fail(&r->t, rel, e, "cannot record");
		return;
	}
	pipe__report(r, &f, wf.total, started, cks, got);
}

static void _copy_symlink(struct pipe__run *r, int sdir, int ddir, const char *name,
			  const char *rel, const struct stat *st)
{
	char target[PATH_MAX];
	const char *what = "cannot create symlink";
	int e;

	if (!r->dst->tree->symlink) {
		/* A server holds no symlinks (url): counted skipped by _count. */
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_SKIPPED, .path = rel,
			.text = "symlink skipped: only regular files and directories are "
				"uploaded" });
		return;
	}
	if (xfer_engine_want(r->ctx, rel, -1, -1) == XFER_WANT_OTHER)
		return;
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_START, .a = st->st_size, .b = xfer_ns(&st->st_mtim), .path = rel,
		.text = "symlink" });
	if ((e = r->src->tree->readlink(r->sep, sdir, name, target, sizeof(target))) != 0) {
		xfer_fail(&r->t, rel, e, "cannot read symlink");
		return;
	}
	/* In place and read back now, so that what was verified survives a crash. */
	if ((e = r->dst->tree->symlink(r->dep, ddir, name, target, st, &what)) != 0) {
		xfer_fail(&r->t, rel, e, what);
		return;
	}
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_DONE, .b = (int64_t)time(NULL), .c = (int64_t)time(NULL),
		.path = rel, .text = "symlink" });
}

/* ---- the walk ---- */

/*
 * A directory of the walk: where its entries go, and its batch. sfd: its
 * own descriptor of the source directory, which the copy threads use and
 * which outlives the walk's (pipe__dir_leave); -1 when it ends as it is left.
 */
struct _ldir {
	int ddir, sfd;
	struct pipe__batch b;
};

static int _visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		  const char *rel, const struct stat *st)
{
	struct pipe__run *r = w->arg;
	struct _ldir *ld = dir->data;
	int sfd = ld->sfd >= 0 ? ld->sfd : dir->fd;

	pipe__batch_maybe_flush(r, &ld->b);
	if (r->g.on && (S_ISREG(st->st_mode) || S_ISLNK(st->st_mode)) &&
	    pipe__group_visit(r, dir->fd, ld->ddir, name, rel, st))
		return 0;
	if (S_ISREG(st->st_mode) && pipe__batchable(r, st)) {
		pipe__batch_add(r, &ld->b, sfd, ld->ddir, name, rel, st);
	} else if (S_ISREG(st->st_mode)) {
		pipe__submit(r, &ld->b, sfd, ld->ddir, name, rel, st);
	} else if (S_ISLNK(st->st_mode)) {
		_copy_symlink(r, dir->fd, ld->ddir, name, rel, st);
	} else if (S_ISDIR(st->st_mode) && xfer_excluded(r->ctx, rel)) {
		/* An exempt= directory inside the tree: neither copied nor, with
		   keep=no, removed. */
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_SKIPPED, .path = rel, .text = XFER_EXCLUDE_REASON });
	} else if (S_ISDIR(st->st_mode)) {
		return 1;
	} else {
		const char *kind = S_ISFIFO(st->st_mode) ? "FIFO" : S_ISSOCK(st->st_mode) ?
				   "socket" : "device";
		char msg[256];

		snprintf(msg, sizeof(msg), "%s skipped: only regular files, directories%s are "
			 "copied", kind, r->dst->tree->symlink ? " and symlinks" : "");
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_SKIPPED, .path = rel, .text = msg });
	}
	return 0;
}

/* The destination directory of sub, made or opened by the destination endpoint. */
static int _enter(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		  const char *name)
{
	struct pipe__run *r = w->arg;
	struct _ldir *ld = dir->data, *child = calloc(1, sizeof(*child));
	int d2 = -1, e;

	if (!child) {
		xfer_fail(&r->t, sub->rel, ENOMEM, "cannot create destination directory");
		return -1;
	}
	if ((e = r->dst->tree->mkdir(r->dep, ld->ddir, name, &d2)) != 0) {
		/* ELOOP: a symlink where a directory belongs is refused. */
		xfer_fail(&r->t, sub->rel, e, "cannot create destination directory");
		free(child);
		return -1;
	}
	child->ddir = d2;
	child->b.ddir = d2;
	/* Its end can be deferred when the threads copy and nothing is grouped. */
	child->sfd = r->nth && !r->g.on && !r->src->stream && sub->fd >= 0 ?
		     fcntl(sub->fd, F_DUPFD_CLOEXEC, 0) : -1;
	sub->data = child;
	return 0;
}

/* The directory's files are in place before it is made durable and timestamped
   (deferred, pipe__dir_leave, when it has its own source descriptor). */
static void _leave(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		   const char *name)
{
	struct pipe__run *r = w->arg;
	struct _ldir *ld = sub->data;

	(void)dir;
	(void)name;
	/* keep=no removes a member's source through sub, which the walk ends now. */
	if (r->g.on && !r->ctx->keep)
		pipe__group_flush(r);
	if (ld->sfd >= 0) {
		pipe__dir_leave(r, &ld->b, ld->ddir, ld->sfd, sub->st);
	} else {
		pipe__batch_end(r, &ld->b);
		/* A source that streams has no descriptors: its handles are its own. */
		r->dst->tree->dir_done(r->dep, ld->ddir, r->src->stream ? -1 : sub->fd, sub->st);
	}
	free(ld);
}

static void _walk_fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	struct pipe__run *r = w->arg;

	xfer_fail(&r->t, rel, err, what);
}

/* ---- the request ---- */

static int _finish(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot,
		   int result, const char *msg)
{
	xfer_finish(r->ctx, result, msg);
	pipe__pool_stop(r);
	free(r->g.p);
	if (r->dep)
		r->dst->request->close(r->dep, droot);
	if (r->sep)
		r->src->request->close(r->sep, sroot);
	free(r->tb0.p);
	xfer_tally_destroy(&r->t);
	return result;
}

void pipe__count(struct pipe__run *r, struct xfer_root *sroot, int tree, struct xfer_walk *w)
{
	struct xfer_walk_dir top = { sroot->dir, "", 0, &sroot->st, NULL };

	if (tree)
		r->src->list(r->sep, w, &top);
	else
		r->t.files = 1, r->t.bytes = sroot->st.st_size;
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_TOTALS, .a = r->t.files, .b = r->t.bytes, .c = r->t.skipped });
}

/* Count the source, then open the destination. */
static int _open_dest(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot,
		      int tree, char *msg, size_t msglen)
{
	struct xfer_count c;
	struct xfer_walk w;

	xfer_count_init(&w, &c, &r->t, !r->dst->tree->symlink);
	r->t.skipped += sroot->skipped;
	pipe__count(r, sroot, tree, &w);
	return r->dst->request->open_dest(r->ctx, sroot, &r->dep, droot, msg, msglen);
}

/* A tree: walk the source and copy; the root's metadata last. */
static void _run_tree(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot)
{
	struct _ldir root = { droot->dir, -1, { NULL, droot->dir } };
	struct xfer_walk w = { .ctx = r->ctx, .arg = r, .visit = _visit, .enter = _enter,
			       .leave = _leave, .fail = _walk_fail };
	struct xfer_walk_dir top = { sroot->dir, "", 0, &sroot->st, &root };

	/* To or from a server: one file, one connection at a time; the endpoint's state
	   is the walker's. */
	if (!r->dst->stream && !r->src->stream)
		pipe__pool_start(r);
	r->src->list(r->sep, &w, &top);
	if (r->g.on)
		pipe__group_flush(r);
	/* Queued after every subdirectory's stage: they end before the root. */
	pipe__batch_end(r, &root.b);
	r->dst->tree->dir_done(r->dep, root.ddir, -1, &sroot->st);
	droot->dir = -1;
}

/* A single file: its relpath is the destination's name. */
static void _run_file(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot)
{
	struct stat st2;

	if (r->src->stat(r->sep, sroot->dir, sroot->name, &st2) != 0 ||
	    st2.st_ino != sroot->st.st_ino)
		xfer_fail(&r->t, sroot->name, EAGAIN, "source changed while walking");
	else
		pipe__copy_file(r, &r->tb0, sroot->dir, sroot->name, droot->dir, droot->name,
				droot->name, &st2);
}

int xfer_pipeline_run(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
		      const struct xfer_endpoint *dst)
{
	struct pipe__run r = { .ctx = ctx, .src = src, .dst = dst };
	struct xfer_root sroot = { .dir = -1 }, droot = { .dir = -1 };
	char msg[XFER_TEXT_MAX];
	int rc, tree;

	xfer_tally_init(&r.t, ctx);
	r.tb0.p = malloc(CHUNK);
	r.tb0.len = CHUNK;
	if (!r.tb0.p)
		return _finish(&r, &sroot, &droot, XFER_RETRYABLE, "out of memory");
	if ((rc = src->request->open_source(ctx, &r.sep, &sroot, msg, sizeof(msg))) != XFER_OK)
		return _finish(&r, &sroot, &droot, rc, msg);
	if (strcmp(ctx->action, "label") == 0) {
		const char *pol = ctx->label_policy ? ctx->label_policy : "archive";

		if (src->device && src->device->label)
			src->device->label(r.sep, &sroot, pol, NULL);
		snprintf(msg, sizeof(msg), "labelled %s", pol);
		return _finish(&r, &sroot, &droot, XFER_OK, msg);
	}
	tree = S_ISDIR(sroot.st.st_mode);
	if (!tree && !S_ISREG(sroot.st.st_mode)) {
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return _finish(&r, &sroot, &droot, XFER_FINAL, msg);
	}
	rc = dst->group ? pipe__group_open(&r, &sroot, &droot, tree, msg, sizeof(msg)) :
	     _open_dest(&r, &sroot, &droot, tree, msg, sizeof(msg));
	if (rc != XFER_OK)
		return _finish(&r, &sroot, &droot, rc, msg);
	if (tree)
		_run_tree(&r, &sroot, &droot);
	else
		_run_file(&r, &sroot, &droot);
	if (xfer_stopped(ctx))
		return _finish(&r, &sroot, &droot, XFER_INTERRUPTED, "interrupted; will be redone");
	/* Every file was verified as it was copied; the final check is the count. */
	xfer_emit(ctx, &(struct xfer_note){ .type = XR_PHASE, .code = XFER_PHASE_VERIFYING });
	if (r.g.on && (rc = r.dst->group->finish(r.dep, msg, sizeof(msg))) != XFER_OK)
		return _finish(&r, &sroot, &droot, rc, msg);
	if (!r.t.failures && !r.dst->discards && !ctx->shard && src->device &&
	    src->device->label && strcmp(ctx->action, "archive") == 0)
		src->device->label(r.sep, &sroot, "archived", ctx->dest);
	rc = xfer_tally_verdict(&r.t, tree, "the source tree", msg, sizeof(msg));
	return _finish(&r, &sroot, &droot, rc, rc == XFER_OK ? NULL : msg);
}
