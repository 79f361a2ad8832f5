/*
 * worker_archive.c - the daemon's side of a stage-in from an archive copy
 * it made: which archive request the source lies in, and the checksums its
 * files had when they were archived, read from the queue before the fork
 * (the worker never touches the database). The worker restores from them
 * (xfer_restore.c).
 *
 * Must never: open a user path (root reads only its own records here).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "restore.h"
#include "worker_int.h"
#include "xfer.h"
#include "xfer_util.h"

struct _known {
	struct restore_known *e;
	size_t n, cap;
	int failed;                  /* out of memory: the list is not whole */
};

static int _collect(const struct queue_item *it, void *arg)
{
	struct _known *k = arg;
	const char *cks = it->checksum_dst && it->checksum_dst[0] ? it->checksum_dst :
			  it->checksum_src;

	if (strcmp(it->type, "file") != 0 || !cks || strlen(cks) >= CKSUM_HEX_MAX)
		return 0;
	if (xfer_grow((void **)&k->e, k->n, &k->cap, sizeof(*k->e), 64) < 0)
		return k->failed = 1;
	k->e[k->n].path = strdup(it->relpath);
	if (!k->e[k->n].path)
		return k->failed = 1;
	k->e[k->n].size = it->size;
	snprintf(k->e[k->n].cks, sizeof(k->e[k->n].cks), "%s", cks);
	k->n++;
	return 0;
}

static int _by_path(const void *a, const void *b)
{
	return strcmp(((const struct restore_known *)a)->path,
		      ((const struct restore_known *)b)->path);
}

int worker__archive_load(struct daemon *d, const struct queue_request *r, struct xfer_archive *a)
{
	struct _known k = { 0 };
	char err[256];
	int rc;

	memset(a, 0, sizeof(*a));
	if (strcmp(r->action, "stage_in") != 0 || r->source[0] != '/')
		return 0;
	rc = queue_archive_of(d->q, r->source, &a->request_id, &a->root, err, sizeof(err));
	if (rc <= 0) {
		if (rc < 0)
			log_err("request %lld: cannot look up the archive its source lies in: %s",
				(long long)r->id, err);
		return rc;
	}
	if (queue_item_list(d->q, a->request_id, QI_DONE, 0, _collect, &k, err,
			    sizeof(err)) < 0 || k.failed) {
		log_err("request %lld: cannot read the checksums of archive request %lld: %s",
			(long long)r->id, (long long)a->request_id, k.failed ? "out of memory" : err);
		a->known = k.e;
		a->nknown = k.n;
		worker__archive_free(a);
		return -1;
	}
	/* relpath order is SQLite's; restore_known is looked up with strcmp. */
	if (k.n > 1)
		qsort(k.e, k.n, sizeof(*k.e), _by_path);
	a->known = k.e;
	a->nknown = k.n;
	return 1;
}

void worker__archive_free(struct xfer_archive *a)
{
	for (size_t i = 0; i < a->nknown; i++)
		free(a->known[i].path);
	free(a->known);
	free(a->root);
	memset(a, 0, sizeof(*a));
}
