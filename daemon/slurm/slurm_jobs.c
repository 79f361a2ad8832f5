/* slurm_jobs.c - see slurm_jobs.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "slurm_compat.h"

#include "slurm_jobs.h"
#include "urlredact.h"

/* Status text: one printable line, short enough for scontrol and squeue. */
#define SJOB_STATUS_MAX 1000
/* Largest admin_comment written: the plan record is at most MaxPlanBytes
   (16 KiB by default) plus site text and the status. */
#define SJOB_RECORD_MAX 65536

static char *_dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

void sjob_init(void)
{
	slurm_init(NULL);
}

void sjob_fini(void)
{
	slurm_fini();
}

static void _err_slurm(char *err, size_t errlen, const char *what, uint32_t job_id)
{
	int e = slurm_errno_now();

	if (job_id)
		snprintf(err, errlen, "%s job %u: %s", what, job_id, slurm_strerror(e));
	else
		snprintf(err, errlen, "%s: %s", what, slurm_strerror(e));
}


int sjob_status_record(const char *cur, const char *text, char *out, size_t outlen)
{
	char clean[SJOB_STATUS_MAX + 1];
	struct record p;
	size_t i, k = 0;
	int n;

	if (!strncmp(text, "stagehand: ", 11))
		text += 11;
	for (i = 0; text[i] && k < SJOB_STATUS_MAX; i++) {
		unsigned char c = (unsigned char)text[i];

		/* "stagehand:" inside the text would be read as a marker. */
		if (c == ':' && i >= 9 && !strncmp(text + i - 9, "stagehand", 9))
			c = ' ';
		clean[k++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
	}
	clean[k] = '\0';
	record_split(cur, &p);
	n = snprintf(out, outlen, "%.*s%s" SJOB_STATUS_MARK "%s%s%s", (int)p.site_len,
		     p.site, p.site_len ? " " : "", clean, *p.rest ? " " : "", p.rest);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

static char *_status_of(const char *ac)
{
	struct record p;

	if (!ac)
		return NULL;
	record_split(ac, &p);
	return p.status ? strndup(p.status, p.status_len) : NULL;
}

static int _fill(struct sjob *j, const slurm_job_info_t *ji)
{
	const char *plan = record_plan(ji->admin_comment);

	memset(j, 0, sizeof(*j));
	j->job_id = ji->job_id;
	j->array_job_id = ji->array_job_id;
	j->array_task_id = ji->array_task_id;
	j->uid = ji->user_id;
	j->gid = ji->group_id;
	j->state = ji->job_state & JOB_STATE_BASE;
	j->priority = ji->priority;
	j->reason = ji->state_reason;
	j->completing = (ji->job_state & JOB_COMPLETING) != 0;
	if (WIFSIGNALED(ji->exit_code))
		j->exit_code = 128 + WTERMSIG(ji->exit_code);
	else
		j->exit_code = WEXITSTATUS(ji->exit_code);
	j->end_time = ji->end_time;
	/* A pending job's start_time is the scheduler's estimate (backfill). */
	if (j->state == JOB_PENDING && ji->priority != 0)
		j->start_time = ji->start_time;
	j->name = _dup(ji->name);
	j->work_dir = _dup(ji->work_dir);
	j->status = _status_of(ji->admin_comment);
	j->admin_comment = _dup(ji->admin_comment);
	j->plan_json = _dup(plan);
	j->hold_pending = record_hold_pending(ji->admin_comment);
	j->restarts = ji->restart_cnt;
	j->requeue = (ji->job_state & (JOB_REQUEUE | JOB_REQUEUE_HOLD |
				       JOB_REQUEUE_FED | JOB_SPECIAL_EXIT)) != 0;
	if (ji->array_job_id && ji->array_task_id == NO_VAL && ji->array_task_str) {
		uint32_t only[2];

		/*
		 * A pending array record with one task left is that task: it
		 * runs under this record's id. 26.05 keeps such a record as
		 * "ID_[T%N]" after the task is updated, where earlier releases
		 * made it the task, so splitting it off would never happen.
		 */
		if (sjob_array_tasks(ji->array_task_str, only, 2) == 1)
			j->array_task_id = only[0];
		else if (!(j->array_tasks = strdup(ji->array_task_str))) {
			sjob_clear(j);
			return -1;
		}
	}
	j->batch_host = _dup(ji->batch_host);
	j->ran = (ji->batch_host && *ji->batch_host) || (ji->nodes && *ji->nodes);
	if ((ji->name && !j->name) || (ji->work_dir && !j->work_dir) ||
	    (plan && !j->plan_json) || (ji->admin_comment && !j->admin_comment) ||
	    (ji->batch_host && !j->batch_host)) {
		sjob_clear(j);
		return -1;
	}
	return 0;
}

void sjob_clear(struct sjob *j)
{
	if (!j)
		return;
	free(j->name);
	free(j->work_dir);
	free(j->status);
	free(j->admin_comment);
	free(j->plan_json);
	free(j->array_tasks);
	free(j->batch_host);
	memset(j, 0, sizeof(*j));
}

void sjob_free(struct sjob *jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		sjob_clear(&jobs[i]);
	free(jobs);
}

/* Append a copy of s (when set) to the NULL-terminated list *l of *n entries. */
static int _push(char ***l, size_t *n, const char *s)
{
	char **nl;

	if (!s || !*s)
		return 0;
	nl = realloc(*l, (*n + 2) * sizeof(*nl));
	if (!nl)
		return -1;
	*l = nl;
	nl[*n] = strdup(s);
	if (!nl[*n])
		return -1;
	nl[++*n] = NULL;
	return 0;
}

void sjob_free_paths(char **paths)
{
	for (char **p = paths; p && *p; p++)
		free(*p);
	free(paths);
}

int sjob_list(struct sjob **out, size_t *n, char *err, size_t errlen)
{
	return sjob_list_ex(out, n, NULL, err, errlen);
}

int sjob_list_ex(struct sjob **out, size_t *n, char ***running, char *err, size_t errlen)
{
	time_t since = 0;

	return sjob_list_since(&since, out, n, running, NULL, NULL, err, errlen) < 0 ?
	       -1 : 0;
}

int sjob_id_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The ids of msg's RUNNING jobs, sorted, into *ids (*nids). 0, or -1 (no memory). */
static int _running_ids(const job_info_msg_t *msg, uint32_t **ids, size_t *nids)
{
	uint32_t *v = malloc((msg->record_count ? msg->record_count : 1) * sizeof(*v));
	size_t k = 0;

	if (!v)
		return -1;
	for (uint32_t i = 0; i < msg->record_count; i++)
		if ((msg->job_array[i].job_state & JOB_STATE_BASE) == JOB_RUNNING)
			v[k++] = msg->job_array[i].job_id;
	qsort(v, k, sizeof(*v), sjob_id_cmp);
	*ids = v;
	*nids = k;
	return 0;
}

int sjob_list_since(time_t *since, struct sjob **out, size_t *n, char ***running,
		    struct sjob_ids *run, const struct sjob_skip *skip, char *err, size_t errlen)
{
	uint32_t **run_ids = run ? &run->ids : NULL;
	size_t *nrun_ids = run ? &run->n : NULL;
	job_info_msg_t *msg = NULL;
	struct sjob *jobs;
	size_t cnt = 0, nrun = 0;
	uint32_t i;

	*out = NULL;
	*n = 0;
	if (running)
		*running = NULL;
	if (run_ids) {
		*run_ids = NULL;
		*nrun_ids = 0;
	}
	if (slurm_load_jobs(*since, &msg, SHOW_ALL | SHOW_DETAIL) != SLURM_SUCCESS) {
		/* slurmctld answers this without packing a single job. */
		if (*since && slurm_errno_now() == SLURM_NO_CHANGE_IN_DATA)
			return 1;
		_err_slurm(err, errlen, "cannot list jobs from slurmctld", 0);
		return -1;
	}
	*since = msg->last_update;
	jobs = calloc(msg->record_count ? msg->record_count : 1, sizeof(*jobs));
	if (!jobs || (run_ids && _running_ids(msg, run_ids, nrun_ids) < 0)) {
		snprintf(err, errlen, "out of memory listing %u jobs", msg->record_count);
		free(jobs);
		slurm_free_job_info_msg(msg);
		return -1;
	}
	for (i = 0; i < msg->record_count; i++) {
		const slurm_job_info_t *ji = &msg->job_array[i];

		if (running && (ji->job_state & JOB_STATE_BASE) == JOB_RUNNING &&
		    !(skip && skip->fn(ji->job_id, skip->arg)) &&
		    (_push(running, &nrun, ji->work_dir) < 0 || _push(running, &nrun, ji->std_out) < 0 ||
		     _push(running, &nrun, ji->std_err) < 0))
			goto nomem;
		if (!record_plan(ji->admin_comment))
			continue;
		if (_fill(&jobs[cnt], ji) < 0)
			goto nomem;
		cnt++;
	}
	slurm_free_job_info_msg(msg);
	*out = jobs;
	*n = cnt;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory reading job %u", msg->job_array[i].job_id);
	if (running) {
		sjob_free_paths(*running);
		*running = NULL;
	}
	if (run_ids) {
		free(*run_ids);
		*run_ids = NULL;
	}
	sjob_free(jobs, cnt);
	slurm_free_job_info_msg(msg);
	return -1;
}

bool sjob_state_is_final(uint32_t state)
{
	return (state & JOB_STATE_BASE) >= JOB_COMPLETE;
}

const char *sjob_state_name(uint32_t state)
{
	/* libslurm's job_state_string is not in the public headers. */
	static const char *const names[] = {
		[JOB_PENDING] = "PENDING",     [JOB_RUNNING] = "RUNNING",
		[JOB_SUSPENDED] = "SUSPENDED", [JOB_COMPLETE] = "COMPLETED",
		[JOB_CANCELLED] = "CANCELLED", [JOB_FAILED] = "FAILED",
		[JOB_TIMEOUT] = "TIMEOUT",     [JOB_NODE_FAIL] = "NODE_FAIL",
		[JOB_PREEMPTED] = "PREEMPTED", [JOB_BOOT_FAIL] = "BOOT_FAIL",
		[JOB_DEADLINE] = "DEADLINE",   [JOB_OOM] = "OUT_OF_MEMORY",
	};
	uint32_t b = state & JOB_STATE_BASE;

	if (b < sizeof(names) / sizeof(names[0]) && names[b])
		return names[b];
	return "UNKNOWN";
}

static int _update(job_desc_msg_t *d, const char *what, char *err, size_t errlen)
{
	if (slurm_update_job(d) != SLURM_SUCCESS) {
		_err_slurm(err, errlen, what, slurm_compat_desc_job_id(d));
		return -1;
	}
	return 0;
}

int sjob_set_status(uint32_t job_id, const char *text, char *err, size_t errlen)
{
	job_info_msg_t *msg = NULL;
	job_desc_msg_t d;
	char *buf, *shown;
	int rc;

	if (slurm_compat_load_job(&msg, job_id, SHOW_DETAIL) != SLURM_SUCCESS) {
		_err_slurm(err, errlen, "cannot read the admin comment of", job_id);
		return -1;
	}
	buf = malloc(SJOB_RECORD_MAX);
	if (!buf) {
		slurm_free_job_info_msg(msg);
		snprintf(err, errlen, "job %u: out of memory", job_id);
		return -1;
	}
	/* The status text may name a URL: others may read admin_comment (urlredact.h). */
	shown = url_redact_dup(text);
	rc = shown ? sjob_status_record(msg->record_count > 0 ?
					msg->job_array[0].admin_comment : NULL, shown, buf,
					SJOB_RECORD_MAX) : -1;
	free(shown);
	slurm_free_job_info_msg(msg);
	if (rc < 0) {
		snprintf(err, errlen, "job %u: admin comment would exceed %d bytes; status not set",
			 job_id, SJOB_RECORD_MAX);
		free(buf);
		return -1;
	}
	slurm_init_job_desc_msg(&d);
	slurm_compat_desc_job_id(&d) = job_id;
	d.admin_comment = buf;
	rc = _update(&d, "cannot set the status of", err, errlen);
	free(buf);
	return rc;
}

bool sjob_held_by_us(const struct sjob *j, char *why, size_t whylen)
{
	if (j->state != JOB_PENDING)
		snprintf(why, whylen, "it is %s, not pending", sjob_state_name(j->state));
	else if (!j->hold_pending)
		snprintf(why, whylen, "its record has no stagehand:hold=pending before the plan");
	else if (j->priority != 0)
		snprintf(why, whylen, "it is not held (priority %u): nothing of ours to release",
			 j->priority);
	else if (j->reason == WAIT_HELD)
		snprintf(why, whylen, "it is held by an administrator (JobHeldAdmin): "
			 "an administrator's 'scontrol release' starts it");
	else if (j->reason != WAIT_HELD_USER)
		snprintf(why, whylen, "it is held with reason %u, not the JobHeldUser hold "
			 "job_submit.lua sets", j->reason);
	else
		return true;
	return false;
}

int sjob_release(uint32_t job_id, char *why, size_t whylen, char *err, size_t errlen)
{
	job_desc_msg_t d;
	struct sjob j;
	bool ours;
	int rc;

	/* Slurm's view now, not the last tick's: an admin may have held it since. */
	rc = sjob_get(job_id, &j, err, errlen);
	if (rc != 0) {
		if (rc == 1)
			snprintf(why, whylen, "slurmctld no longer knows it");
		return rc;
	}
	ours = sjob_held_by_us(&j, why, whylen);
	sjob_clear(&j);
	if (!ours)
		return 1;
	slurm_init_job_desc_msg(&d);
	slurm_compat_desc_job_id(&d) = job_id;
	d.priority = INFINITE;
	return _update(&d, "cannot release", err, errlen);
}

int sjob_split_task(uint32_t array_job_id, uint32_t task_id, const char *meta_admin_comment,
		    const char *text, char *err, size_t errlen)
{
	job_desc_msg_t d;
	char id[32], *buf = malloc(SJOB_RECORD_MAX);
	char *shown = url_redact_dup(text);	/* as in sjob_set_status */

	snprintf(id, sizeof(id), "%u_%u", array_job_id, task_id);
	if (!buf || !shown ||
	    sjob_status_record(meta_admin_comment, shown, buf, SJOB_RECORD_MAX) < 0) {
		free(shown);
		snprintf(err, errlen, "cannot split task %s off its array: %s", id,
			 buf && shown ? "admin comment too long" : "out of memory");
		free(buf);
		return -1;
	}
	free(shown);
	slurm_init_job_desc_msg(&d);
	d.job_id_str = id;
	d.admin_comment = buf;
	if (slurm_update_job(&d) != SLURM_SUCCESS) {
		int e = slurm_errno_now();

		snprintf(err, errlen, "cannot split task %s off its array: %s", id, slurm_strerror(e));
		free(buf);
		return -1;
	}
	free(buf);
	return 0;
}

int sjob_get(uint32_t job_id, struct sjob *out, char *err, size_t errlen)
{
	job_info_msg_t *msg = NULL;
	uint32_t i;
	int rc = 1;

	memset(out, 0, sizeof(*out));
	if (slurm_compat_load_job(&msg, job_id, SHOW_ALL | SHOW_DETAIL) != SLURM_SUCCESS) {
		if (slurm_errno_now() == ESLURM_INVALID_JOB_ID)
			return 1;
		_err_slurm(err, errlen, "cannot read", job_id);
		return -1;
	}
	/* For an array id slurmctld answers with every task: take the exact one. */
	for (i = 0; i < msg->record_count; i++) {
		if (msg->job_array[i].job_id != job_id)
			continue;
		if (_fill(out, &msg->job_array[i]) < 0) {
			snprintf(err, errlen, "out of memory reading job %u", job_id);
			rc = -1;
		} else {
			rc = 0;
		}
		break;
	}
	slurm_free_job_info_msg(msg);
	return rc;
}

size_t sjob_array_tasks(const char *spec, uint32_t *out, size_t max)
{
	const char *p = spec;
	size_t n = 0;

	while (p && *p && *p != '%' && n < max) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b = a, step = 1;

		if (end == p)
			return n;
		p = end;
		if (*p == '-') {
			b = strtoul(p + 1, &end, 10);
			if (end == p + 1 || b < a)
				return n;
			p = end;
			if (*p == ':') {
				step = strtoul(p + 1, &end, 10);
				if (end == p + 1 || step == 0)
					return n;
				p = end;
			}
		}
		for (unsigned long t = a; t <= b && n < max; t += step)
			out[n++] = (uint32_t)t;
		if (*p == ',')
			p++;
		else if (*p && *p != '%')
			return n;
	}
	return n;
}

int sjob_node_down(const char *node, char *err, size_t errlen)
{
	node_info_msg_t *msg = NULL;
	int rc = 0;

	if (slurm_load_node_single(&msg, (char *)node, SHOW_ALL) != SLURM_SUCCESS || !msg ||
	    msg->record_count < 1) {
		_err_slurm(err, errlen, "cannot read node state", 0);
		if (msg)
			slurm_free_node_info_msg(msg);
		return -1;
	}
	if ((msg->node_array[0].node_state & NODE_STATE_BASE) == NODE_STATE_DOWN ||
	    (msg->node_array[0].node_state & (NODE_STATE_NO_RESPOND | NODE_STATE_FAIL)))
		rc = 1;
	slurm_free_node_info_msg(msg);
	return rc;
}
