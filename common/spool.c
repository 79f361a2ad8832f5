/*
 * spool.c - undelivered job-end events (see spool.h for the format).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dclient.h"
#include "durable.h"
#include "monoclock.h"
#include "spool.h"

#define SPOOL_SCAN_MAX 4096

const char *jobend_state(const char *slurm_state, bool have_exit, int exit_code, int sig)
{
	static const char *const final[] = {
		"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
		"OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
	};

	for (size_t i = 0; slurm_state && i < sizeof(final) / sizeof(final[0]); i++)
		if (strcmp(slurm_state, final[i]) == 0)
			return final[i];
	if (!have_exit)
		return "UNKNOWN";
	if (sig == SIGTERM || sig == SIGKILL || sig == SIGINT || sig == SIGHUP)
		return "CANCELLED";
	return exit_code == 0 && sig == 0 ? "COMPLETED" : "FAILED";
}

json_t *jobend_event(const struct jobend_info *ji)
{
	json_t *ev = json_pack("{s:s, s:i, s:i, s:s}",
			       "state", jobend_state(ji->slurm_state, ji->have_exit,
						     ji->exit_code, ji->sig),
			       "exit_code", ji->have_exit ? ji->exit_code : -1,
			       "signal", ji->have_exit ? ji->sig : 0,
			       "source", ji->source ? ji->source : "spank");
	if (ev == NULL)
		return NULL;
	if ((ji->uid >= 0 && json_object_set_new(ev, "uid", json_integer(ji->uid)) < 0) ||
	    (ji->gid >= 0 && json_object_set_new(ev, "gid", json_integer(ji->gid)) < 0) ||
	    (ji->user && json_object_set_new(ev, "user", json_string(ji->user)) < 0) ||
	    (ji->work_dir && json_object_set_new(ev, "work_dir", json_string(ji->work_dir)) < 0) ||
	    (ji->node && json_object_set_new(ev, "node", json_string(ji->node)) < 0) ||
	    (ji->sluid && json_object_set_new(ev, "sluid", json_string(ji->sluid)) < 0) ||
	    json_object_set_new(ev, "plan", ji->plan ? json_incref(ji->plan) : json_null()) < 0) {
		json_decref(ev);
		return NULL;
	}
	return ev;
}

enum spool_send spool_send_event(const struct dclient_target *t, unsigned long job_id,
				 const json_t *event, int timeout_ms,
				 char *err, size_t errlen)
{
	char path[64];
	struct dclient_resp resp;
	char uerr[512];

	snprintf(path, sizeof(path), "/v1/jobs/%lu/end", job_id);
	char *body = json_dumps(event, JSON_COMPACT);
	if (body == NULL) {
		snprintf(err, errlen, "cannot encode the job-end event of job %lu", job_id);
		return SPOOL_RETRY;
	}
	int rc = dclient_request(t, &(struct dclient_call){ .method = "POST", .path = path,
				   .body = body, .timeout_ms = timeout_ms },
				 &resp, uerr, sizeof(uerr));
	free(body);
	if (rc < 0) {
		snprintf(err, errlen, "%s", uerr);
		return SPOOL_RETRY;
	}
	enum spool_send out;
	if ((resp.status >= 200 && resp.status < 300) || resp.status == 409) {
		out = SPOOL_SENT;
	} else if (resp.status >= 400 && resp.status < 500 && resp.status != 408 &&
		   resp.status != 429) {
		snprintf(err, errlen, "the daemon refused the job-end event of job %lu "
			 "(HTTP %d): %.300s", job_id, resp.status,
			 resp.body ? resp.body : "");
		out = SPOOL_REJECTED;
	} else {
		snprintf(err, errlen, "the daemon could not take the job-end event of "
			 "job %lu now (HTTP %d)", job_id, resp.status);
		out = SPOOL_RETRY;
	}
	dclient_resp_free(&resp);
	return out;
}

int spool_prepare_dir(const char *dir, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create spool directory %s: %s (create "
			 "its parent, or set spool= in plugstack.conf)", dir,
			 strerror(errno));
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open spool directory %s: %s%s", dir,
			 strerror(errno),
			 errno == ELOOP || errno == ENOTDIR ?
			 " (it must be a real directory, not a link)" : "");
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot stat spool directory %s: %s", dir,
			 strerror(errno));
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen, "spool directory %s is owned by uid %lu, not %lu; "
			 "fix with: chown root: %s && chmod 0700 %s", dir,
			 (unsigned long)st.st_uid, (unsigned long)geteuid(), dir, dir);
		close(fd);
		return -1;
	}
	if ((st.st_mode & 077) != 0 && fchmod(fd, 0700) < 0) {
		snprintf(err, errlen, "cannot make spool directory %s private: %s", dir,
			 strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int _write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

int spool_write(const char *dir, unsigned long job_id, const json_t *event,
		char *err, size_t errlen)
{
	char name[64], tmp[96];
	int dfd = -1, fd = -1, rc = -1, e;
	char *text = NULL;

	snprintf(name, sizeof(name), "job-%lu.json", job_id);
	snprintf(tmp, sizeof(tmp), ".job-%lu.json.%ld.tmp", job_id, (long)getpid());

	json_t *rec = json_pack("{s:i, s:I, s:O}", "version", 1, "job_id",
				(json_int_t)job_id, "event", (json_t *)event);
	if (rec == NULL || (text = json_dumps(rec, JSON_COMPACT)) == NULL) {
		snprintf(err, errlen, "cannot encode the spool record of job %lu", job_id);
		goto out;
	}
	if (strlen(text) > SPOOL_MAX_FILE) {
		snprintf(err, errlen, "job-end event of job %lu is %zu bytes, over the "
			 "%u byte spool limit", job_id, strlen(text), SPOOL_MAX_FILE);
		goto out;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(err, errlen, "cannot open spool directory %s: %s", dir,
			 strerror(errno));
		goto out;
	}
	fd = durable_create(dfd, tmp, O_WRONLY);
	if (fd < 0) {
		snprintf(err, errlen, "cannot create %s/%s: %s", dir, tmp, strerror(errno));
		goto out;
	}
	if (_write_all(fd, text, strlen(text)) < 0 || _write_all(fd, "\n", 1) < 0) {
		snprintf(err, errlen, "cannot write %s/%s: %s", dir, tmp, strerror(errno));
		(void)unlinkat(dfd, tmp, 0);
		goto out;
	}
	e = durable_commit(dfd, tmp, name, fd, DURABLE_FSYNC);
	fd = -1;
	if (e) {
		snprintf(err, errlen, "cannot make %s/%s durable as %s: %s", dir, tmp, name,
			 strerror(e));
		goto out;
	}
	(void)fsync(dfd);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(text);
	json_decref(rec);
	return rc;
}

/* "job-<digits>.json" -> job id; 0 for anything else. */
static unsigned long _name_job(const char *name)
{
	const char *p = name;
	unsigned long id = 0;

	if (strncmp(p, "job-", 4) != 0)
		return 0;
	p += 4;
	if (*p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (id > 0xffffffffUL / 10)
			return 0;
		id = id * 10 + (unsigned long)(*p - '0');
	}
	if (strcmp(p, ".json") != 0 || id > 0xffffffffUL)
		return 0;
	return id;
}

json_t *spool_read(const char *dir, const char *name, unsigned long *job_id,
		   char *err, size_t errlen)
{
	char path[PATH_MAX + 64];
	struct stat st;
	json_error_t jerr;
	unsigned long id = _name_job(name);

	int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		snprintf(err, errlen, "spool path %s/%s too long", dir, name);
		return NULL;
	}
	if (id == 0) {
		snprintf(err, errlen, "%s is not a spool file name (job-<id>.json)", path);
		return NULL;
	}
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SPOOL_MAX_FILE) {
		snprintf(err, errlen, "%s is not a regular file of at most %u bytes", path,
			 SPOOL_MAX_FILE);
		close(fd);
		return NULL;
	}
	json_t *rec = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	close(fd);
	if (rec == NULL) {
		snprintf(err, errlen, "%s: line %d: %s", path, jerr.line, jerr.text);
		return NULL;
	}
	json_t *ver = json_object_get(rec, "version");
	json_t *jid = json_object_get(rec, "job_id");
	json_t *ev = json_object_get(rec, "event");
	if (!json_is_integer(ver) || json_integer_value(ver) != 1 ||
	    !json_is_integer(jid) || (unsigned long)json_integer_value(jid) != id ||
	    !json_is_object(ev)) {
		snprintf(err, errlen, "%s: not a version 1 spool record of job %lu "
			 "(need version, job_id and an event object)", path, id);
		json_decref(rec);
		return NULL;
	}
	json_incref(ev);
	json_decref(rec);
	*job_id = id;
	return ev;
}

static int _cmp_ul(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	return x < y ? -1 : x > y;
}

void spool_set_aside(const char *dir, unsigned long id,
			void (*warn)(const char *), const char *why)
{
	char from[PATH_MAX + 64], to[PATH_MAX + 64], msg[1024];

	int a = snprintf(from, sizeof(from), "%s/job-%lu.json", dir, id);
	int b = snprintf(to, sizeof(to), "%s/bad-job-%lu.json", dir, id);
	if (a < 0 || (size_t)a >= sizeof(from) || b < 0 || (size_t)b >= sizeof(to))
		return;   /* spool_prepare_dir keeps dir far shorter */
	if (rename(from, to) < 0)
		(void)unlink(from);
	if (warn) {
		int n = snprintf(msg, sizeof(msg), "job-end event of job %lu set aside "
				 "as %s: %s", id, to, why);
		if (n < 0 || (size_t)n >= sizeof(msg))
			memcpy(msg + sizeof(msg) - 4, "...", 4);   /* shortened */
		warn(msg);
	}
}

int spool_deliver(const char *dir, const struct dclient_target *t, const struct spool_budget *b,
		  struct spool_stats *st, void (*warn)(const char *msg), char *err, size_t errlen)
{
	int max = b->max, timeout_ms = b->timeout_ms;
	long long deadline = mono_ms() + b->total_ms;
	unsigned long *ids = NULL;
	size_t n = 0;
	struct dirent *de;

	memset(st, 0, sizeof(*st));
	if (max <= 0)
		return 0;
	DIR *d = opendir(dir);
	if (d == NULL) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "cannot read spool directory %s: %s", dir,
			 strerror(errno));
		return -1;
	}
	ids = calloc(SPOOL_SCAN_MAX, sizeof(*ids));
	if (ids == NULL) {
		closedir(d);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	while ((de = readdir(d)) != NULL && n < SPOOL_SCAN_MAX) {
		unsigned long id = _name_job(de->d_name);
		if (id)
			ids[n++] = id;
	}
	closedir(d);
	qsort(ids, n, sizeof(*ids), _cmp_ul);

	for (size_t i = 0; i < n; i++) {
		char name[64], e[1024];
		unsigned long id = 0;

		if ((int)i >= max || mono_ms() >= deadline) {
			st->left = (int)(n - i);
			break;
		}
		snprintf(name, sizeof(name), "job-%lu.json", ids[i]);
		json_t *ev = spool_read(dir, name, &id, e, sizeof(e));
		if (ev == NULL) {
			char path[PATH_MAX + 64];
			struct stat lst;
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			if (lstat(path, &lst) < 0 && errno == ENOENT)
				continue;   /* delivered by a concurrent job end */
			spool_set_aside(dir, ids[i], warn, e);
			st->rejected++;
			continue;
		}
		long long left = deadline - mono_ms();
		int tmo = left < timeout_ms ? (int)(left > 0 ? left : 1) : timeout_ms;
		enum spool_send r = spool_send_event(t, id, ev, tmo, e, sizeof(e));
		json_decref(ev);
		if (r == SPOOL_SENT) {
			char path[PATH_MAX + 64];
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			(void)unlink(path);
			st->delivered++;
		} else if (r == SPOOL_REJECTED) {
			spool_set_aside(dir, id, warn, e);
			st->rejected++;
		} else {
			st->daemon_down = true;
			st->left = (int)(n - i);
			if (warn) {
				char msg[1200];
				snprintf(msg, sizeof(msg), "spooled job-end events wait: %s", e);
				warn(msg);
			}
			break;
		}
	}
	free(ids);
	return 0;
}
