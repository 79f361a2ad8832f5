/* api_mover.c - see api_mover.h. */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_decode.h"
#include "api_mover.h"
#include "log.h"
#include "metrics.h"
#include "mover_auth.h"
#include "mover_exec.h"
#include "queue.h"
#include "queue_shards.h"
#include "slurm_nodes.h"
#include "xfer.h"

#define RECORDS_MAX 4096
/* How long the writer waits for slurmctld's word on the mover job's node
   (slurm_nodes.h caches it): past it, 503 and the mover asks again. */
#define NODE_LOOKUP_MS 300
#define REFUSAL_LOG_PER_S 10

/* The request, checked for the caller, and the shard's holder. NULL with out filled. */
static struct queue_request *_shard(struct daemon *d, const struct api_caller *who,
				    int64_t id, int idx, int64_t job, int *attempt,
				    struct api_reply *out)
{
	struct queue_request *r = NULL;
	struct queue_shard *s = NULL;
	char err[512];
	int n = 0, rc = queue_request_get(d->q, id, &r, err, sizeof(err)), ok = 0;

	if (rc == 1)
		api_error(out, 404, "request %lld does not exist", (long long)id);
	else if (rc < 0)
		api_error(out, 500, "%s", err);
	if (rc != 0)
		return NULL;
	if (who->uid != r->uid && who->uid != 0) {
		api_error(out, 403, "request %lld belongs to another user", (long long)id);
		goto fail;
	}
	if (queue_shards_list(d->q, id, &s, &n, err, sizeof(err)) < 0) {
		api_error(out, 500, "%s", err);
		goto fail;
	}
	for (int i = 0; i < n; i++)
		if (s[i].idx == idx) {
			ok = s[i].state == QSH_SUBMITTED && s[i].slurm_job == job && job > 0;
			*attempt = s[i].attempts;
			if (!ok)
				api_error(out, 409, "shard %d of request %lld is %s (mover job %lld), "
					  "not held by mover job %lld: this mover stops", idx,
					  (long long)id, queue_shard_state_name(s[i].state),
					  (long long)s[i].slurm_job, (long long)job);
			break;
		}
	if (n == 0 || idx < 0 || idx >= n)
		api_error(out, 404, "request %lld has no shard %d", (long long)id, idx);
	queue_shards_free(s, n);
	if (ok)
		return r;
fail:
	queue_request_free(r);
	return NULL;
}

static int _add_file(const char *relpath, int64_t size, void *arg)
{
	(void)size;
	return json_array_append_new(arg, json_string(relpath)) < 0;
}

static int _add_done(const char *relpath, int64_t size, int64_t mtime_ns, void *arg)
{
	return json_array_append_new(arg, json_pack("[s,I,I]", relpath, (json_int_t)size,
						    (json_int_t)mtime_ns)) < 0;
}

static int _add_range(const char *relpath, int64_t off, int64_t len, int64_t size, void *arg)
{
	return json_array_append_new(arg, json_pack("[s,I,I,I]", relpath, (json_int_t)off,
						    (json_int_t)len, (json_int_t)size)) < 0;
}

static void _get(struct daemon *d, const struct queue_request *r, int idx, struct api_reply *out)
{
	json_t *files = json_array(), *done = json_array(), *ranges = json_array(), *opts;
	char err[512];

	if (queue_shard_files(d->q, r->id, idx, _add_file, files, err, sizeof(err)) < 0 ||
	    queue_shard_done(d->q, r->id, idx, _add_done, done, err, sizeof(err)) < 0 ||
	    queue_shard_ranges(d->q, r->id, idx, _add_range, ranges, err, sizeof(err)) < 0) {
		json_decref(files);
		json_decref(done);
		json_decref(ranges);
		api_error(out, 500, "%s", err);
		return;
	}
	log_info("request %lld: shard %d: mover fetched %zu files, %zu of them verified before, "
		 "and %zu byte ranges to copy", (long long)r->id, idx, json_array_size(files),
		 json_array_size(done), json_array_size(ranges));
	opts = json_loads(r->options, 0, NULL);
	out->body = json_pack("{s:I,s:i,s:I,s:s,s:s,s:s,s:o,s:s,s:s,s:b,s:b,s:I,s:o,s:o,s:o}",
			      "request", (json_int_t)r->id, "shard", idx,
			      "job_id", (json_int_t)r->job_id, "action", r->action,
			      "source", r->source, "dest", r->dest ? r->dest : "",
			      "options", opts ? opts : json_object(),
			      "checksum", d->conf->checksum,
			      "xattr_ns", conf_xattr_prefix(d->conf),
			      "sync_batch", d->conf->sync_batch,
			      "verify_sample", d->conf->verify_sample,
			      "bandwidth", (json_int_t)d->conf->mover_bandwidth,
			      "files", files, "done", done, "ranges", ranges);
	out->status = out->body ? 200 : 500;
}

static const char *_str(json_t *a, size_t i)
{
	const char *s = json_string_value(json_array_get(a, i));

	return s ? s : "";
}

/* One record [type, code, a, b, c, d, e, cks, cks2, path, text], checked. */
struct _rec {
	int type;
	int64_t v[6];
	const char *cks, *cks2, *path, *text;    /* borrowed from the JSON */
};

/* rec into p: 0, or -1 with why (the record is not one the daemon takes). */
static int _parse(json_t *rec, struct _rec *p, char *why, size_t whylen)
{
	char why2[400];
	int type;

	if (!json_is_array(rec) || json_array_size(rec) != 11) {
		snprintf(why, whylen, "a record is an array of 11 values");
		return -1;
	}
	for (int i = 0; i < 6; i++)
		p->v[i] = json_integer_value(json_array_get(rec, (size_t)i + 1));
	p->type = type = (int)json_integer_value(json_array_get(rec, 0));
	p->cks = _str(rec, 7);
	p->cks2 = _str(rec, 8);
	p->path = _str(rec, 9);
	p->text = _str(rec, 10);
	if (strlen(p->cks) >= CKSUM_HEX_MAX || strlen(p->cks2) >= CKSUM_HEX_MAX ||
	    strlen(p->text) > XFER_TEXT_MAX) {
		snprintf(why, whylen, "a checksum or text is too long");
		return -1;
	}
	if ((type >= XR_ITEM_START && type <= XR_ITEM_FAILED) || type == XR_ITEM_FILE ||
	    type == XR_RANGE_DONE) {
		if (xfer_exclude_check(p->path, why2, sizeof(why2)) < 0) {
			snprintf(why, whylen, "record path: %s", why2);
			return -1;
		}
	}
	return 0;
}

/* One POST of a shard's records: whose, and what its records said. */
struct _post {
	struct daemon *d;
	const struct queue_request *r;
	int idx;                     /* the shard */
	int result;                  /* an XR_RESULT record's verdict, -1: none yet */
	char msg[XFER_TEXT_MAX + 1]; /* its message */
	char why[512];               /* why a record was refused */
};

/* One checked record other than a verified file (those are stored by _files_store): 0, or -1 with po->why. */
static int _apply(struct _post *po, const struct _rec *p)
{
	struct daemon *d = po->d;
	const struct queue_request *r = po->r;
	int idx = po->idx;
	const int64_t *v = p->v;
	const char *cks = p->cks, *path = p->path, *text = p->text;
	char src[XFER_PATH_MAX * 2 + 2], dst[XFER_PATH_MAX * 2 + 2], err[512];
	int type = p->type, rc = 0;

	switch (type) {
	case XR_ITEM_START: {
		struct queue_item_meta m = { path, text, v[1], v[2], (int)v[3] };

		rc = queue_item_start(d->q, r->id, &m, err, sizeof(err));
		break;
	}
	case XR_ITEM_COPIED:
		rc = queue_item_copied(d->q, r->id, path, cks, err, sizeof(err));
		break;
	case XR_ITEM_DONE: {	/* XR_ITEM_FILE records go to _files_add, never here */
		int is_file = strcmp(text, "file") == 0;
		struct queue_audit a = { r->job_id, r->uid, src, dst, cks, v[1], v[2], v[3] };

		if (snprintf(src, sizeof(src), "%s/%s", r->source, path) >= (int)sizeof(src) ||
		    snprintf(dst, sizeof(dst), "%s/%s", r->dest ? r->dest : "-", path) >=
		    (int)sizeof(dst))
			log_warn("request %lld: audit path truncated", (long long)r->id);
		rc = queue_item_done(d->q, r->id, path, is_file ? cks : NULL, is_file ? &a : NULL,
				     err, sizeof(err));
		if (rc == 0 && is_file) {
			atomic_fetch_add(&d->metrics->bytes_moved, (uint64_t)v[1]);
			atomic_fetch_add(&d->metrics->files_moved, 1);
		}
		break;
	}
	case XR_RANGE_DONE: {
		struct queue_range_rec rg = { path, v[1], v[2], v[3], v[4], cks };

		/* Counted as a file once, when the final pass finishes it. */
		rc = queue_range_done(d->q, r->id, idx, &rg, err, sizeof(err));
		if (rc == 1)
			log_info("request %lld shard %d: range %s@%lld reported again (or not this "
				 "shard's): recorded once", (long long)r->id, idx, path,
				 (long long)v[1]);
		break;
	}
	case XR_ITEM_SKIPPED:
		rc = queue_item_finish(d->q, r->id, path, "special", QI_SKIPPED, text, err,
				       sizeof(err));
		break;
	case XR_ITEM_FAILED:
		rc = queue_item_finish(d->q, r->id, path, NULL, QI_FAILED, text, err, sizeof(err));
		log_warn("request %lld shard %d: %s", (long long)r->id, idx, text);
		break;
	case XR_LOG:
		log_info("request %lld shard %d (mover): %s", (long long)r->id, idx, text);
		break;
	case XR_RESULT:
		po->result = (int)v[0];
		snprintf(po->msg, sizeof(po->msg), "%s", text);
		break;
	case XR_TOTALS:	/* the plan has the request's totals */
	case XR_PHASE:
		break;
	default:
		snprintf(po->why, sizeof(po->why), "record type %d is not taken from movers", type);
		return -1;
	}
	if (rc < 0)
		log_err("request %lld shard %d: recording progress failed: %s", (long long)r->id,
			idx, err);
	return 0;
}

/*
 * Verified-file records waiting to be stored together: a mover's POST is
 * mostly these, and one call for a run of them (queue_items_files_done)
 * costs the queue one counter update instead of one per file.
 */
#define FILES_RUN 256
struct _files {
	struct queue_file_done f[FILES_RUN];
	int n;
};

/* Store the waiting files and forget them. As _apply: a failure is logged, not the mover's. */
static void _files_store(struct daemon *d, const struct queue_request *r, int idx,
			 struct _files *fs)
{
	char err[512];
	int off = 0, stored, rc;

	while (off < fs->n) {
		rc = queue_items_files_done(d->q, r->id, fs->f + off, fs->n - off, &stored, err,
					    sizeof(err));
		for (int i = off; i < off + stored; i++) {
			atomic_fetch_add(&d->metrics->bytes_moved, (uint64_t)fs->f[i].size);
			atomic_fetch_add(&d->metrics->files_moved, 1);
		}
		if (rc != 0)
			log_err("request %lld shard %d: recording progress failed: %s",
				(long long)r->id, idx, err);
		/* A checksum refused: on with the files after it; the database failed: stop. */
		off = rc > 0 ? off + stored + 1 : fs->n;
	}
	for (int i = 0; i < fs->n; i++) {
		free((char *)fs->f[i].audit.path_src);
		free((char *)fs->f[i].audit.path_dst);
	}
	fs->n = 0;
}

/* A verified-file record to store with the others (p->type == XR_ITEM_FILE). */
static void _files_add(struct daemon *d, const struct queue_request *r, int idx,
		       struct _files *fs, const struct _rec *p)
{
	char *src = NULL, *dst = NULL;

	if (fs->n == FILES_RUN)
		_files_store(d, r, idx, fs);
	if (asprintf(&src, "%s/%s", r->source, p->path) < 0 ||
	    asprintf(&dst, "%s/%s", r->dest ? r->dest : "-", p->path) < 0) {
		free(src);
		log_err("request %lld shard %d: recording progress failed: out of memory",
			(long long)r->id, idx);
		return;
	}
	/* The item is done only if the source's checksum equals the one read
	   back from the destination, which the audit keeps. */
	fs->f[fs->n++] = (struct queue_file_done){
		.relpath = p->path, .cks_src = p->cks, .cks_dst = p->cks2, .size = p->v[1],
		.mtime_ns = p->v[2], .mode = (int)p->v[3],
		.audit = { r->job_id, r->uid, src, dst, p->cks2, p->v[1], p->v[4], p->v[5] },
	};
}

/* Log a refused record post; at most REFUSAL_LOG_PER_S lines a second. */
static void _log_refusal(const struct queue_request *r, int idx, int64_t job,
			 const struct api_caller *who, const char *why)
{
	static _Atomic long long second;
	static atomic_int lines;
	long long now = (long long)time(NULL), was = atomic_load(&second);

	if (was != now && atomic_compare_exchange_strong(&second, &was, now))
		atomic_store(&lines, 0);
	if (atomic_fetch_add(&lines, 1) >= REFUSAL_LOG_PER_S)
		return;
	log_warn("request %lld shard %d: records for mover job %lld from uid %u refused: %s",
		 (long long)r->id, idx, (long long)job, (unsigned)who->uid, why);
}

/*
 * Are these records the mover job's own (mover_auth.h)? 1 yes; 0 refused,
 * out filled (403, or 503 when the node cannot be checked yet) and logged.
 */
static int _from_mover(struct daemon *d, const struct api_caller *who,
		       const struct queue_request *r, int idx, int attempt, int64_t job,
		       json_t *body, struct api_reply *out)
{
	const char *tok = json_string_value(json_object_get(body, "token"));
	char why[768], nwhy[512];
	unsigned status = 403;
	enum snodes_verdict v;

	if (!who->tcp)
		snprintf(why, sizeof(why), "mover records come only over TCP with a MUNGE "
			 "credential, from the node of the shard's mover job, not over the UNIX "
			 "socket");
	else if (who->uid != r->uid)
		snprintf(why, sizeof(why), "mover records come only from the mover job, which "
			 "runs as the request's owner (uid %u), not uid %u", (unsigned)r->uid,
			 (unsigned)who->uid);
	else if (!mover_auth_token_ok(mover_exec_auth(d->movers), r->id, idx, attempt, tok))
		snprintf(why, sizeof(why), "%s: only mover job %lld, which stagehandd submitted "
			 "for shard %d, has this shard's token (docs/admin-guide.md, \"Who may report\")",
			 tok ? "the mover token is not this shard's" : "no mover token in the body",
			 (long long)job, idx);
	else if (!d->conf->slurm_watch)
		snprintf(why, sizeof(why), "the node of mover job %lld cannot be checked: this "
			 "daemon does not talk to slurmctld (SlurmWatch=no)", (long long)job);
	else if (job > (int64_t)UINT32_MAX)
		snprintf(why, sizeof(why), "%lld is not a Slurm job id", (long long)job);
	else if ((v = snodes_check((uint32_t)job, who->peer,
				   who->peer ? sizeof(struct sockaddr_storage) : 0,
				   NODE_LOOKUP_MS, nwhy, sizeof(nwhy))) == SNODES_YES)
		return 1;
	else if (v == SNODES_UNKNOWN) {
		status = 503;
		snprintf(why, sizeof(why), "the node of mover job %lld cannot be checked now: %s; "
			 "try again", (long long)job, nwhy);
	} else {
		char from[INET6_ADDRSTRLEN] = "?";
		const struct sockaddr *p = who->peer;

		if (p && p->sa_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)p)->sin_addr,
				  from, sizeof(from));
		else if (p && p->sa_family == AF_INET6)
			inet_ntop(AF_INET6,
				  &((const struct sockaddr_in6 *)(const void *)p)->sin6_addr, from,
				  sizeof(from));
		snprintf(why, sizeof(why), "mover records are taken only from the node slurmctld "
			 "gave mover job %lld: %s (this came from %s)", (long long)job, nwhy, from);
	}
	_log_refusal(r, idx, job, who, why);
	api_error(out, status, "request %lld shard %d: records refused: %s", (long long)r->id,
		  idx, why);
	return 0;
}

static void _records(struct daemon *d, const struct queue_request *r, int idx, int64_t job,
		     json_t *body, struct api_reply *out)
{
	json_t *recs = json_object_get(body, "records");
	struct _post po = { .d = d, .r = r, .idx = idx, .result = -1 };
	char err[512], *why = po.why, *msg = po.msg;
	int batched;
	size_t i, n = json_array_size(recs);
	struct _files *fs;
	struct _rec p;

	if (!json_is_array(recs) || n > RECORDS_MAX) {
		api_error(out, 400, "'records' must be an array of at most %d records", RECORDS_MAX);
		return;
	}
	if (!(fs = calloc(1, sizeof(*fs)))) {
		api_error(out, 503, "out of memory");
		return;
	}
	batched = queue_batch_begin(d->q) == 0;
	for (i = 0; i < n; i++) {
		if (_parse(json_array_get(recs, i), &p, po.why, sizeof(po.why)) < 0)
			break;
		if (p.type == XR_ITEM_FILE) {
			_files_add(d, r, idx, fs, &p);
			continue;
		}
		_files_store(d, r, idx, fs);	/* in order: those before this record first */
		if (_apply(&po, &p) < 0)
			break;
	}
	_files_store(d, r, idx, fs);
	free(fs);
	if (batched && queue_batch_end(d->q, err, sizeof(err)) < 0) {
		api_error(out, 503, "recording progress failed: %s", err);
		return;
	}
	if (why[0]) {
		api_error(out, 400, "record %zu: %s (the %zu before it were recorded)", i, why, i);
		return;
	}
	if (po.result >= 0) {
		enum queue_shard_state st = po.result == XFER_OK ? QSH_DONE : po.result == XFER_FINAL ?
					    QSH_FAILED : QSH_QUEUED;
		int rc = queue_shard_set(d->q, r->id, idx, job, st, msg[0] ? msg : NULL, err,
					 sizeof(err));

		if (rc < 0) {
			api_error(out, 503, "%s", err);
			return;
		}
		log_info("request %lld: shard %d: mover job %lld finished: %s%s%s", (long long)r->id,
			 idx, (long long)job, queue_shard_state_name(st), msg[0] ? ": " : "", msg);
		daemon_wake(d);
	}
	out->status = 200;
	out->body = json_pack("{s:i}", "recorded", (int)n);
}

void api_mover_route(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
		     const char *method, char **seg, int nseg, json_t *body, struct api_reply *out)
{
	const char *js = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "job");
	int64_t id = 0, idx = -1, job = 0;
	int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
	struct queue_request *r;
	int attempt = 0;

	/* A shard index counts from 0 (api_decode_id takes ids from 1). */
	if (strcmp(seg[4], "0") == 0)
		idx = 0;
	else if (api_decode_id(seg[4], &idx) < 0)
		idx = -1;
	if (api_decode_id(seg[2], &id) < 0 || idx < 0 || idx > 100000) {
		api_error(out, 404, "not a request and shard: '%.64s/shards/%.64s'", seg[2], seg[4]);
		return;
	}
	if (!js || api_decode_id(js, &job) < 0) {
		api_error(out, 400, "the mover's Slurm job id is missing (?job=ID)");
		return;
	}
	if (!(nseg == 5 && get) && !(nseg == 6 && post && strcmp(seg[5], "records") == 0)) {
		api_error(out, nseg == 5 || (nseg == 6 && strcmp(seg[5], "records") == 0) ? 405 : 404,
			  "use GET .../shards/IDX or POST .../shards/IDX/records");
		return;
	}
	r = _shard(d, who, id, (int)idx, job, &attempt, out);
	if (!r)
		return;
	if (get)
		_get(d, r, (int)idx, out);
	else if (_from_mover(d, who, r, (int)idx, attempt, job, body, out))
		_records(d, r, (int)idx, job, body, out);
	queue_request_free(r);
}
