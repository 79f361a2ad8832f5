/*
 * mover_main.c - stagehand-mover: one shard of a request, run by Slurm as a
 * batch job of the request's owner on the transfer partition (MoverPartition).
 *
 * It fetches its shard from stagehandd over the API (TCP with a MUNGE
 * credential: the daemon knows it is the owner; its records also carry the
 * shard's token from the job's environment and must come from the job's
 * node, mover_auth.h), copies the shard's byte
 * ranges of big files (xfer_range.h), runs the transfer engine of
 * daemon/xfer.h on its whole files exactly as a local worker does, and
 * reports every record the engine emits to the daemon in batches. It keeps
 * no state of its own: the daemon's queue records what is done, and a mover
 * that dies leaves nothing behind that the next one needs (a range it had
 * begun is rewritten whole by the next).
 *
 * Must never: run as root on user files (it refuses uid 0), or go on after
 * the daemon said its shard belongs to another job (409).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "conf.h"
#include "dclient.h"
#include "monoclock.h"
#include "mover_auth.h"
#include "xfer.h"
#include "xfer_engine.h"
#include "xfer_range.h"
#include "xfer_util.h"

#define POST_BYTES 32768            /* a batch's JSON stays below MaxRequestBytes' default */
#define POST_EVERY_MS 1000          /* and no record waits longer than this */
#define FETCH_MAX_BODY (1u << 30)
#define RETRY_FOR_MS (10 * 60 * 1000)

static volatile sig_atomic_t _stop;

static void _on_term(int sig)
{
	(void)sig;
	_stop = 1;
}

struct _mover {
	struct dclient_target t;
	long long request, job;
	int shard;
	char path[128];              /* /v1/requests/R/shards/I */
	json_t *batch;               /* records not posted yet */
	size_t batch_bytes;
	long long last_post_ms;
	int result;                  /* enum xfer_result, -1 = none yet */
	int fenced;                  /* the daemon gave the shard to another job */
	long long posted;
	char token[MOVER_TOKEN_HEX + 1]; /* the shard's, from the job's environment (mover_auth.h) */
};

static void _die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void _die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stagehand-mover: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* One exchange, retried while the daemon is unreachable (restarting) for up to 10 minutes. */
static int _call(struct _mover *m, const char *method, const char *path, const char *body,
		 size_t max_body, struct dclient_resp *resp)
{
	long long end = mono_ms() + RETRY_FOR_MS;
	char err[512];
	unsigned delay = 1;

	for (;;) {
		struct dclient_call c = { .method = method, .path = path, .body = body,
					  .timeout_ms = 120000, .max_body = max_body };
		int rc = dclient_request(&m->t, &c, resp, err, sizeof(err));

		if (rc == 0 && resp->status != 503)
			return 0;
		if (rc == 0)
			fprintf(stderr, "stagehand-mover: %s %s: %s; retrying\n", method, path,
				resp->body);
		else
			fprintf(stderr, "stagehand-mover: %s %s: %s; retrying\n", method, path, err);
		dclient_resp_free(resp);
		if (mono_ms() >= end)
			return -1;
		sleep(delay);
		delay = delay < 16 ? delay * 2 : 16;
	}
}

static void _post(struct _mover *m)
{
	struct dclient_resp resp;
	char path[192];
	json_t *body;
	char *txt;

	if (!json_array_size(m->batch) || m->fenced)
		goto clear;
	/* The token rides in the body, which the MUNGE credential binds. */
	body = json_pack("{s:I,s:s,s:O}", "job", (json_int_t)m->job, "token", m->token,
			 "records", m->batch);
	txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!txt)
		_die("out of memory");
	snprintf(path, sizeof(path), "%s/records?job=%lld", m->path, m->job);
	if (_call(m, "POST", path, txt, 0, &resp) < 0) {
		free(txt);
		_die("request %lld shard %d: cannot report to stagehandd at %s for 10 minutes; "
		     "the daemon runs this shard again", m->request, m->shard, m->t.label);
	}
	free(txt);
	if (resp.status == 409) {
		fprintf(stderr, "stagehand-mover: %s\n", resp.body);
		m->fenced = 1;
		_stop = 1;
	} else if (resp.status != 200) {
		fprintf(stderr, "stagehand-mover: request %lld shard %d: the daemon refused a "
			"report (HTTP %d): %s\n", m->request, m->shard, resp.status, resp.body);
		m->fenced = 1;
		_stop = 1;
	} else {
		m->posted += (long long)json_array_size(m->batch);
	}
	dclient_resp_free(&resp);
clear:
	json_array_clear(m->batch);
	m->batch_bytes = 0;
	m->last_post_ms = mono_ms();
}

static void _queue_rec(struct _mover *m, const struct xfer_rec *r, const char *path,
		       const char *text)
{
	json_t *a = json_pack("[i,i,I,I,I,I,I,s,s,s,s]", (int)r->type, (int)r->code,
			      (json_int_t)r->a, (json_int_t)r->b, (json_int_t)r->c,
			      (json_int_t)r->d, (json_int_t)r->e, r->cks, r->cks2, path, text);

	if (!a || json_array_append_new(m->batch, a) < 0)
		_die("out of memory");
	if (r->type == XR_RESULT)
		m->result = r->code;
	m->batch_bytes += strlen(path) + strlen(text) + 2 * CKSUM_HEX_MAX + 120;
	if (m->batch_bytes >= POST_BYTES)
		_post(m);
}

struct _engine {
	struct xfer_ctx ctx;
	struct xfer_range *ranges;   /* owned: byte ranges of big files this shard copies */
	size_t nranges;
};

/* The shard's ranges, then its whole files: one XR_RESULT for both. */
static void *_engine(void *arg)
{
	struct _engine *e = arg;
	char msg[XFER_TEXT_MAX];
	int rc = xfer_range_run(&e->ctx, e->ranges, e->nranges, msg, sizeof(msg));

	if (rc != XFER_OK)
		xfer_finish(&e->ctx, rc, msg);
	else if (e->nranges && !e->ctx.shard->nfiles)
		xfer_finish(&e->ctx, XFER_OK, "");	/* ranges only: no walk needed */
	else
		xfer_run(&e->ctx);
	shutdown(e->ctx.chan, SHUT_WR);
	return NULL;
}

/* Read the engine's records until it closes its end; post them in batches. */
static void _pump(struct _mover *m, int fd)
{
	static char buf[2 * (sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX)];
	size_t len = 0;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		size_t off = 0;
		ssize_t n;

		if (poll(&p, 1, POST_EVERY_MS) == 0 ||
		    mono_ms() - m->last_post_ms >= POST_EVERY_MS) {
			_post(m);
			if (!p.revents)
				continue;
		}
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		for (;;) {
			struct xfer_rec r;
			char path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
			ssize_t used = xfer_parse(buf + off, len - off, &r, path, text);

			if (used == 0)
				break;
			if (used < 0)
				_die("the transfer engine sent a corrupt record");
			_queue_rec(m, &r, path, text);
			off += (size_t)used;
		}
		memmove(buf, buf + off, len - off);
		len -= off;
	}
}

static const char *_jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static void _usage(FILE *fp)
{
	fprintf(fp, "usage: stagehand-mover [--server HOST:PORT] [--config FILE] --request ID "
		"--shard N [--job ID]\n\n"
		"Runs one shard of a stagehand request; stagehandd submits it as a Slurm job\n"
		"(see stagehand-mover(8)).\n");
}

static long long _num(const char *s, const char *what)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s ? s : "", &end, 10);
	if (!s || errno || end == s || *end || v < 0)
		_die("%s must be a number, not '%s'", what, s ? s : "");
	return v;
}

/*
 * The engine's context for the shard the daemon sent (doc, which keeps
 * owning every string the context borrows). files and done are new arrays
 * (free them); exits on a malformed shard.
 */
static void _ctx_from_shard(struct _engine *e, long long req, json_t *doc,
			    struct xfer_shard *shard, const char ***files_out,
			    struct xfer_done_ent **done_out)
{
	struct xfer_done_ent *done = NULL;
	const char **files = NULL;
	char err[512];
	json_t *o, *v;
	size_t i;

	o = json_object_get(doc, "options");
	memset(e, 0, sizeof(*e));
	/* Movers copy local paths with the local engine; the daemon sends nothing else. */
	e->ctx.backend = "local";
	e->ctx.request_id = req;
	e->ctx.job_id = json_integer_value(json_object_get(doc, "job_id"));
	e->ctx.uid = geteuid();
	e->ctx.action = _jstr(doc, "action");
	e->ctx.source = _jstr(doc, "source");
	e->ctx.dest = _jstr(doc, "dest");
	e->ctx.keep = !json_is_false(json_object_get(o, "keep"));
	if (cksum_algo_from_name(_jstr(doc, "checksum"), &e->ctx.algo) < 0)
		e->ctx.algo = CKSUM_XXH128;
	e->ctx.xattr_ns = _jstr(doc, "xattr_ns") ? _jstr(doc, "xattr_ns") : "user.";
	e->ctx.sync_batch = json_is_true(json_object_get(doc, "sync_batch"));
	e->ctx.verify_sample = json_is_true(json_object_get(doc, "verify_sample")) ? 16 : 0;
	e->ctx.beneath = _jstr(o, "beneath");
	e->ctx.line = (int)json_integer_value(json_object_get(o, "line"));
	e->ctx.stop = &_stop;
	/* MoverBandwidth: this mover's own cap (0 = none). */
	e->ctx.bucket = xfer_bucket_create((uint64_t)json_integer_value(json_object_get(doc,
										 "bandwidth")));
	v = json_object_get(o, "exclude");
	if (json_is_array(v) && json_array_size(v) <= XFER_EXCLUDE_MAX) {
		const char **ex = calloc(json_array_size(v) + 1, sizeof(*ex));
		json_t *x;
		size_t k = 0;

		if (!ex)
			_die("out of memory");
		json_array_foreach(v, i, x)
			if (json_is_string(x) && xfer_exclude_check(json_string_value(x), err,
								    sizeof(err)) == 0)
				ex[k++] = json_string_value(x);
		e->ctx.exclude = ex;
	}
	v = json_object_get(doc, "files");
	files = calloc(json_array_size(v) + 1, sizeof(*files));
	v = json_object_get(doc, "done");
	done = calloc(json_array_size(v) + 1, sizeof(*done));
	if (!files || !done || !e->ctx.bucket)
		_die("out of memory");
	json_array_foreach(json_object_get(doc, "files"), i, o)
		files[i] = json_string_value(o) ? json_string_value(o) : "";
	shard->files = files;
	shard->nfiles = json_array_size(json_object_get(doc, "files"));
	json_array_foreach(v, i, o) {
		done[i].relpath = (char *)json_string_value(json_array_get(o, 0));
		done[i].size = json_integer_value(json_array_get(o, 1));
		done[i].mtime_ns = json_integer_value(json_array_get(o, 2));
		if (!done[i].relpath)
			_die("the daemon's resume set is malformed");
	}
	e->ctx.done = done;
	e->ctx.ndone = json_array_size(v);
	e->ctx.shard = shard;
	v = json_object_get(doc, "ranges");
	e->nranges = json_array_size(v);
	e->ranges = calloc(e->nranges + 1, sizeof(*e->ranges));
	if (!e->ranges)
		_die("out of memory");
	json_array_foreach(v, i, o) {
		struct xfer_range *r = &e->ranges[i];

		r->relpath = json_string_value(json_array_get(o, 0));
		r->off = json_integer_value(json_array_get(o, 1));
		r->len = json_integer_value(json_array_get(o, 2));
		r->size = json_integer_value(json_array_get(o, 3));
		if (!r->relpath || xfer_exclude_check(r->relpath, err, sizeof(err)) < 0 ||
		    r->off < 0 || r->len <= 0 || r->size < r->off + r->len)
			_die("the daemon's range %zu is malformed", i);
	}
	*files_out = files;
	*done_out = done;
}

/* Long on purpose: the mover's life in order, straight down: arguments, fetch, run, report. */
int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'c' },
		{ "request", required_argument, NULL, 'r' },
		{ "shard", required_argument, NULL, 'i' },
		{ "job", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct _mover m = { .result = -1, .request = -1, .shard = -1 };
	const char *server = NULL, *conf = NULL, *job = getenv("SLURM_JOB_ID");
	struct dclient_resp resp;
	struct _engine e;
	struct xfer_shard shard;
	struct xfer_done_ent *done = NULL;
	const char **files = NULL;
	char err[512] = "", path[192];
	json_t *doc;
	struct sigaction sa;
	int c, sv[2];
	pthread_t th;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': server = optarg; break;
		case 'c': conf = optarg; break;
		case 'r': m.request = _num(optarg, "--request"); break;
		case 'i': m.shard = (int)_num(optarg, "--shard"); break;
		case 'j': job = optarg; break;
		case 'h': _usage(stdout); return 0;
		case 'V': printf("stagehand-mover %s\n", PACKAGE_VERSION); return 0;
		default: _usage(stderr); return 2;
		}
	}
	if (m.request <= 0 || m.shard < 0 || optind != argc) {
		_usage(stderr);
		return 2;
	}
	if (!job)
		_die("no Slurm job id (SLURM_JOB_ID unset and no --job): stagehand-mover runs as "
		     "a mover job that stagehandd submits");
	m.job = _num(job, "the job id");
	if (geteuid() == 0)
		_die("refusing to run as root: a mover runs as the request's owner");
	/* The shard's token: out of the environment, and this process no longer
	   readable by others of the owner's (/proc/PID/environ, ptrace). */
	{
		const char *tok = getenv(MOVER_TOKEN_ENV);

		if (!tok || strlen(tok) != MOVER_TOKEN_HEX)
			_die("no mover token (%s unset or malformed): stagehand-mover runs as a "
			     "mover job that stagehandd submits, which sets it", MOVER_TOKEN_ENV);
		prctl(PR_SET_DUMPABLE, 0);
		memcpy(m.token, tok, sizeof(m.token));
		memset((char *)tok, 'x', MOVER_TOKEN_HEX);
		unsetenv(MOVER_TOKEN_ENV);
	}
	if (dclient_find(&m.t, server, NULL, conf ? conf : CONF_DEFAULT_FILE, conf != NULL, err,
			 sizeof(err)) < 0)
		_die("%s", err);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = _on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	umask(077);
	snprintf(m.path, sizeof(m.path), "/v1/requests/%lld/shards/%d", m.request, m.shard);
	snprintf(path, sizeof(path), "%s?job=%lld", m.path, m.job);
	if (_call(&m, "GET", path, NULL, FETCH_MAX_BODY, &resp) < 0)
		_die("cannot reach stagehandd at %s", m.t.label);
	if (resp.status != 200)
		_die("request %lld shard %d: stagehandd at %s answered HTTP %d: %s", m.request,
		     m.shard, m.t.label, resp.status, resp.body);
	doc = json_loads(resp.body, 0, NULL);
	dclient_resp_free(&resp);
	if (!doc || !_jstr(doc, "action") || !_jstr(doc, "source") || !_jstr(doc, "dest") ||
	    !json_is_array(json_object_get(doc, "files")) ||
	    !json_is_array(json_object_get(doc, "done")))
		_die("request %lld shard %d: the daemon's answer is not a shard", m.request, m.shard);
	_ctx_from_shard(&e, m.request, doc, &shard, &files, &done);
	fprintf(stderr, "stagehand-mover: request %lld shard %d (job %lld): %zu files, %zu "
		"verified before, %zu byte ranges; %s %s -> %s\n", m.request, m.shard, m.job,
		shard.nfiles, e.ctx.ndone, e.nranges, e.ctx.action, e.ctx.source, e.ctx.dest);
	/* The shards of a request start together: the destination root is made
	   here first (an existing one is fine), so that no two engines race to
	   create it. */
	if (xfer_mkparents(e.ctx.dest, err, sizeof(err)) < 0 ||
	    (mkdir(e.ctx.dest, 0700) < 0 && errno != EEXIST))
		fprintf(stderr, "stagehand-mover: %s: %s\n", e.ctx.dest, err[0] ? err :
			strerror(errno));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		_die("socketpair: %s", strerror(errno));
	e.ctx.chan = sv[1];
	m.batch = json_array();
	m.last_post_ms = mono_ms();
	if (!m.batch || pthread_create(&th, NULL, _engine, &e) != 0)
		_die("cannot start the transfer engine");
	_pump(&m, sv[0]);
	pthread_join(th, NULL);
	if (m.result < 0 && !m.fenced) {
		struct xfer_rec r = { .type = XR_RESULT, .code = XFER_RETRYABLE };

		_queue_rec(&m, &r, "", "the transfer engine ended without a result");
	}
	_post(&m);
	fprintf(stderr, "stagehand-mover: request %lld shard %d: %lld records reported, result %d\n",
		m.request, m.shard, m.posted, m.result);
	close(sv[0]);
	close(sv[1]);
	free(files);
	free(done);
	free((void *)e.ctx.exclude);
	free(e.ranges);
	xfer_bucket_destroy(e.ctx.bucket);
	json_decref(doc);
	json_decref(m.batch);
	if (m.fenced)
		return 3;
	return m.result == XFER_OK ? 0 : 1;
}
