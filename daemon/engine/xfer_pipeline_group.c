/*
 * xfer_pipeline_group.c - the driver's side of a destination that groups
 * files (xfer_endpoint.h, "endpoints that group files"; the bundle).
 *
 * The walker hands each regular file and symlink to the destination in walk
 * order: kept by an earlier attempt (reported at once), stored file by file
 * (the ordinary path of xfer_pipeline.c), or appended to the open group. A
 * member is reported only once its whole group was made durable, read back
 * and recorded (group_commit); until then it waits here. With keep=no a
 * group is also committed when the walk leaves a directory, since a member's
 * source is removed through its directory's handle, which the walk ends
 * there.
 *
 * Runs on the walker only: the groups' members are appended one after the
 * other, while files stored one by one go to the copy threads.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xfer_pipeline_int.h"
#include "xfer_util.h"

/* The count of pass 1, with the destination shown every entry first. */
struct _survey {
	struct xfer_count c;         /* first: xfer_count_init's visit takes w->arg as this */
	struct pipe__run *r;
	int (*count)(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		     const char *rel, const struct stat *st);
};

static int _survey_visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
			 const char *rel, const struct stat *st)
{
	struct _survey *s = w->arg;

	s->r->dst->group->survey(s->r->dep, rel, st);
	return s->count(w, dir, name, rel, st);
}

int pipe__group_open(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot,
		     int tree, char *msg, size_t msglen)
{
	const struct xfer_endpoint *use = r->dst;
	struct _survey s = { .r = r };
	struct xfer_walk w;
	int rc;

	rc = r->dst->request->open_dest(r->ctx, sroot, &r->dep, droot, msg, msglen);
	if (rc != XFER_OK)
		return rc;
	xfer_count_init(&w, &s.c, &r->t, 0);
	s.count = w.visit;
	w.visit = _survey_visit;
	w.arg = &s;
	pipe__count(r, sroot, tree, &w);
	if ((rc = r->dst->group->plan(r->dep, &use, msg, msglen)) != XFER_OK)
		return rc;
	if (use == r->dst) {
		r->g.on = 1;
		return XFER_OK;
	}
	r->dst->request->close(r->dep, droot);
	r->dep = NULL;
	r->dst = use;
	return use->request->open_dest(r->ctx, sroot, &r->dep, droot, msg, msglen);
}

/* Verified by an earlier attempt: the daemon learns of it now unless it knew already. */
static void _kept(struct pipe__run *r, int sdir, const char *name, const char *rel,
		  const struct stat *st, const char *cks)
{
	int64_t now = (int64_t)time(NULL);

	if (S_ISLNK(st->st_mode)) {
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_START, .b = xfer_ns(&st->st_mtim), .path = rel,
			.text = "symlink" });
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_DONE, .b = now, .c = now, .path = rel, .text = "symlink" });
		return;
	}
	xfer_tally_add(&r->t, &r->t.kept);
	if (xfer_engine_want(r->ctx, rel, st->st_size, xfer_ns(&st->st_mtim)) != XFER_WANT_KEPT)
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_FILE, .path = rel, .a = st->st_size,
			.b = xfer_ns(&st->st_mtim), .c = (int)(st->st_mode & 07777), .d = now,
			.e = now, .cks = cks, .cks2 = cks });
	pipe__remove_source(r, sdir, name, rel);
}

/* Append one member to the open group; it waits there for the group's commit. */
static void _add(struct pipe__run *r, int sdir, const char *name, const char *rel,
		 const struct stat *st, const char *target)
{
	struct pipe__pend *p;
	struct stat cur;
	const char *what = "cannot write bundle for";
	int sfd = -1, e;

	if (xfer_grow((void **)&r->g.p, r->g.n, &r->g.cap, sizeof(*r->g.p), 1024) < 0) {
		xfer_fail(&r->t, rel, ENOMEM, what);
		return;
	}
	p = &r->g.p[r->g.n];
	memset(p, 0, sizeof(*p));
	p->started = (int64_t)time(NULL);
	if (target) {
		xfer_emit(r->ctx, &(struct xfer_note){
			.type = XR_ITEM_START, .b = xfer_ns(&st->st_mtim), .path = rel,
			.text = "symlink" });
	} else if ((sfd = r->src->open_read(r->sep, sdir, name, st, &cur)) < 0) {
		e = errno;
		xfer_fail(&r->t, rel, e, e == EAGAIN ? "source changed while walking" :
			  "cannot open source");
		return;
	}
	e = r->dst->group->group_add(r->dep, rel, sfd, st, target, p->cks, &what);
	if (sfd >= 0)
		close(sfd);
	if (!e && (!(p->name = strdup(name)) || !(p->rel = strdup(rel))))
		e = ENOMEM;	/* in the group, but never reported: the verdict retries */
	if (e) {
		free(p->name);
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, what);
		return;
	}
	p->sdir = sdir;
	p->st = *st;
	r->g.n++;
}

int pipe__group_visit(struct pipe__run *r, int sdir, int ddir, const char *name,
		      const char *rel, const struct stat *st)
{
	char target[PATH_MAX], cks[CKSUM_HEX_MAX];
	int link = S_ISLNK(st->st_mode), e, want;

	if (xfer_engine_want(r->ctx, rel, link ? -1 : st->st_size,
			     link ? -1 : xfer_ns(&st->st_mtim)) == XFER_WANT_OTHER) {
		if (!link)
			xfer_tally_add(&r->t, &r->t.kept);
		return 1;
	}
	if (link && (e = r->src->tree->readlink(r->sep, sdir, name, target, sizeof(target))) != 0) {
		xfer_fail(&r->t, rel, e, "cannot read symlink");
		return 1;
	}
	if (r->dst->group->kept(r->dep, ddir, name, rel, st, link ? target : NULL, cks)) {
		_kept(r, sdir, name, rel, st, cks);
		return 1;
	}
	want = r->dst->group->group_want(r->dep, rel, st, link ? target : NULL);
	if (want == XFER_G_FILE)
		return 0;
	if (want == XFER_G_FULL)
		pipe__group_flush(r);
	_add(r, sdir, name, rel, st, link ? target : NULL);
	return 1;
}

void pipe__group_flush(struct pipe__run *r)
{
	const char *what = "cannot write bundle for";
	int e = r->g.n ? r->dst->group->group_commit(r->dep, &what) : 0;
	int64_t now = (int64_t)time(NULL);

	for (size_t i = 0; i < r->g.n; i++) {
		struct pipe__pend *p = &r->g.p[i];

		if (e && e != EINTR)
			xfer_fail(&r->t, p->rel, e, what);
		else if (!e && S_ISLNK(p->st.st_mode))
			xfer_emit(r->ctx, &(struct xfer_note){
				.type = XR_ITEM_DONE, .b = now, .c = now, .path = p->rel,
				.text = "symlink" });
		else if (!e)
			pipe__report(r, &(struct pipe__file){ p->sdir, p->name, p->rel, &p->st },
				     p->st.st_size, p->started, p->cks, p->cks);
		free(p->name);
		free(p->rel);
	}
	r->g.n = 0;
}
