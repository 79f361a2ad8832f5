/* audit_tally.c - see audit_tally.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_tally.h"
#include "grow.h"
#include "queue_audit.h"

struct audit_tally *audit_tally_new(void)
{
	struct audit_tally *t = calloc(1, sizeof(*t));

	if (t)
		pthread_mutex_init(&t->lock, NULL);
	return t;
}

/* The totals emptied, roots and users freed; last_id back to the start. */
static void _reset(struct audit_tally *t)
{
	for (size_t i = 0; i < t->nusers; i++)
		free(t->users[i].user);
	for (int i = 0; i < t->nroots; i++)
		free(t->roots[i].path);
	free(t->users);
	free(t->roots);
	t->users = NULL;
	t->roots = NULL;
	t->nusers = t->capusers = 0;
	t->nroots = 0;
	t->last_id = 0;
}

void audit_tally_free(struct audit_tally *t)
{
	if (!t)
		return;
	_reset(t);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

int audit_tally_under(const char *path, const char *root)
{
	size_t n;

	if (strcmp(root, "/") == 0)
		return path[0] == '/';
	n = strlen(root);
	return strncmp(path, root, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* Whether roots are the ones t counts for. */
static int _same_roots(const struct audit_tally *t, char *const *roots, int nroots)
{
	if (t->nroots != nroots)
		return 0;
	for (int i = 0; i < nroots; i++)
		if (strcmp(t->roots[i].path, roots[i]) != 0)
			return 0;
	return 1;
}

/* The entry of uid, added in order when new; NULL when out of memory. */
static struct audit_user *_user(struct audit_tally *t, int64_t uid)
{
	size_t lo = 0, hi = t->nusers;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->users[mid].uid == uid)
			return &t->users[mid];
		if (t->users[mid].uid < uid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (grow_array((void **)&t->users, &t->capusers, t->nusers + 1, sizeof(*t->users), 16) < 0)
		return NULL;
	memmove(&t->users[lo + 1], &t->users[lo], (t->nusers - lo) * sizeof(*t->users));
	t->nusers++;
	memset(&t->users[lo], 0, sizeof(*t->users));
	t->users[lo].uid = uid;
	return &t->users[lo];
}

/* One row into the totals (queue_audit_after's callback): 0, or 1 when out of memory. */
static int _count(const struct queue_audit_entry *e, void *arg)
{
	struct audit_tally *t = arg;
	struct audit_user *u = _user(t, e->uid);

	if (!u)
		return 1;
	/* The name the audit export shows for the uid: the greatest one seen. */
	if (e->user && (!u->user || strcmp(e->user, u->user) > 0)) {
		char *name = strdup(e->user);

		if (!name)
			return 1;
		free(u->user);
		u->user = name;
	}
	u->files++;
	u->bytes += e->bytes;
	for (int i = 0; i < t->nroots; i++) {
		struct audit_root *r = &t->roots[i];

		if (audit_tally_under(e->src, r->path)) {
			r->read_files++;
			r->read_bytes += e->bytes;
		}
		if (audit_tally_under(e->dst, r->path)) {
			r->written_files++;
			r->written_bytes += e->bytes;
		}
	}
	t->last_id = e->id;
	t->rows_read++;
	return 0;
}

int audit_tally_update(struct audit_tally *t, struct queue *q, char *const *roots, int nroots,
		       char *err, size_t errlen)
{
	int n;

	if (!_same_roots(t, roots, nroots)) {
		_reset(t);
		if (nroots > 0 && !(t->roots = calloc((size_t)nroots, sizeof(*t->roots))))
			goto oom;
		for (; t->nroots < nroots; t->nroots++)
			if (!(t->roots[t->nroots].path = strdup(roots[t->nroots])))
				goto oom;
	}
	do {
		int64_t before = t->rows_read;

		n = queue_audit_after(q, t->last_id, AUDIT_TALLY_CHUNK, _count, t, err, errlen);
		if (n < 0)
			return -1;
		if (t->rows_read - before < n)
			goto oom;
	} while (n == AUDIT_TALLY_CHUNK);
	return 0;
oom:
	/* Start over next time rather than show totals of part of the trail. */
	_reset(t);
	snprintf(err, errlen, "audit totals: out of memory (%s)", strerror(ENOMEM));
	return -1;
}
