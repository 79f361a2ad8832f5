/* progress.c - see progress.h. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "progress.h"

/* Per-request memory between redraws, to compute a rate. */
struct _track {
	json_int_t id;
	double last_t;
	double last_bytes;
	double rate;		/* bytes/s, smoothed */
	int seen;
};

struct progress {
	FILE *fp;
	int lines;		/* lines drawn last time, to move back over */
	struct _track *tr;
	size_t ntr;
};

char *progress_fmt_bytes(double bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	size_t u = 0;

	if (bytes < 0)
		bytes = 0;
	while (bytes >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bytes /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f %s", bytes, units[u]);
	else
		snprintf(buf, len, "%.1f %s", bytes, units[u]);
	return buf;
}

int progress_state_terminal(const char *state)
{
	return state && (!strcmp(state, "done") || !strcmp(state, "failed_final") ||
			 !strcmp(state, "cancelled"));
}

static const char *_str(json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : dflt;
}

static double _num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : 0.0;
}

static void _fmt_job(json_t *r, char *buf, size_t len)
{
	json_t *j = json_object_get(r, "job_id");

	if (json_is_integer(j))
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
	else
		snprintf(buf, len, "-");
}

void progress_print_table(FILE *fp, json_t *requests, int show_uid)
{
	size_t i;
	json_t *r;

	if (!json_is_array(requests) || json_array_size(requests) == 0) {
		fprintf(fp, "no requests\n");
		return;
	}
	if (show_uid)
		fprintf(fp, "%-8s %-6s ", "REQUEST", "UID");
	else
		fprintf(fp, "%-8s ", "REQUEST");
	fprintf(fp, "%-8s %-9s %-16s %-13s %-21s %s\n",
		"JOB", "ACTION", "STATE", "FILES", "BYTES", "SOURCE -> DEST");
	json_array_foreach(requests, i, r) {
		char id[32], job[32], files[32], bytes[48], b1[16], b2[16];

		snprintf(id, sizeof(id), "r%" JSON_INTEGER_FORMAT,
			 json_integer_value(json_object_get(r, "id")));
		_fmt_job(r, job, sizeof(job));
		snprintf(files, sizeof(files), "%.0f/%.0f", _num(r, "files_done"), _num(r, "files_total"));
		snprintf(bytes, sizeof(bytes), "%s/%s",
			 progress_fmt_bytes(_num(r, "bytes_done"), b1, sizeof(b1)),
			 progress_fmt_bytes(_num(r, "bytes_total"), b2, sizeof(b2)));
		if (show_uid)
			fprintf(fp, "%-8s %-6.0f ", id, _num(r, "uid"));
		else
			fprintf(fp, "%-8s ", id);
		fprintf(fp, "%-8s %-9s %-16s %-13s %-21s %s -> %s\n", job,
			_str(r, "action", "?"), _str(r, "state", "?"), files, bytes,
			_str(r, "source", "?"), _str(r, "dest", "?"));
		if (json_is_string(json_object_get(r, "error")) && *_str(r, "error", ""))
			fprintf(fp, "%8s error: %s\n", "", _str(r, "error", ""));
	}
}

struct progress *progress_new(FILE *fp)
{
	struct progress *p = calloc(1, sizeof(*p));

	if (p)
		p->fp = fp;
	return p;
}

void progress_free(struct progress *p)
{
	if (!p)
		return;
	free(p->tr);
	free(p);
}

static struct _track *_track_for(struct progress *p, json_int_t id)
{
	struct _track *t;
	size_t i;

	for (i = 0; i < p->ntr; i++)
		if (p->tr[i].id == id)
			return &p->tr[i];
	t = realloc(p->tr, (p->ntr + 1) * sizeof(*t));
	if (!t)
		return NULL;
	p->tr = t;
	t = &p->tr[p->ntr++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	return t;
}

static int _term_width(FILE *fp)
{
	struct winsize ws;

	if (ioctl(fileno(fp), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
		return ws.ws_col;
	return 80;
}

static void _fmt_eta(double secs, char *buf, size_t len)
{
	long s;

	if (!isfinite(secs) || secs < 0 || secs > 99 * 3600.0) {
		snprintf(buf, len, "--:--");
		return;
	}
	s = (long)(secs + 0.5);
	if (s >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
	else
		snprintf(buf, len, "%ld:%02ld", s / 60, s % 60);
}

void progress_draw(struct progress *p, json_t *requests, double now)
{
	int width = _term_width(p->fp), drawn = 0, k;
	size_t i;
	json_t *r;

	if (p->lines > 0)
		fprintf(p->fp, "\033[%dA", p->lines);
	json_array_foreach(requests, i, r) {
		json_int_t id = json_integer_value(json_object_get(r, "id"));
		struct _track *t = _track_for(p, id);
		const char *state = _str(r, "state", "?");
		double bt = _num(r, "bytes_total"), bd = _num(r, "bytes_done");
		double ft = _num(r, "files_total"), fd = _num(r, "files_done");
		double frac = bt > 0 ? bd / bt : (ft > 0 ? fd / ft : 0.0);
		char head[48], tail[200], rate[24], done[24], total[24], eta[48];
		char bar[256];
		int barw, fill;

		if (t) {
			if (!t->seen) {
				t->last_t = now;
				t->last_bytes = bd;
				t->seen = 1;
			} else if (now - t->last_t >= 0.2) {
				double inst = (bd - t->last_bytes) / (now - t->last_t);

				if (inst < 0)
					inst = 0;
				t->rate = t->rate > 0 ? 0.6 * t->rate + 0.4 * inst : inst;
				t->last_t = now;
				t->last_bytes = bd;
			}
		}
		if (!strcmp(state, "done"))
			frac = 1.0;
		if (frac > 1.0)
			frac = 1.0;
		snprintf(head, sizeof(head), "r%-6" JSON_INTEGER_FORMAT " %-9.9s", id,
			 _str(r, "action", "?"));
		progress_fmt_bytes(bd, done, sizeof(done));
		progress_fmt_bytes(bt, total, sizeof(total));
		progress_fmt_bytes(t ? t->rate : 0, rate, sizeof(rate));
		if (progress_state_terminal(state) || !t || t->rate <= 0)
			snprintf(eta, sizeof(eta), progress_state_terminal(state) ? "" : "--:--");
		else
			_fmt_eta((bt - bd) / t->rate, eta, sizeof(eta));
		if (progress_state_terminal(state))
			snprintf(tail, sizeof(tail), "%3.0f%% %.0f/%.0f files %s %s",
				 frac * 100, fd, ft, total, state);
		else
			snprintf(tail, sizeof(tail), "%3.0f%% %.0f/%.0f files %s/%s %s/s ETA %s %s",
				 frac * 100, fd, ft, done, total, rate, eta, state);
		barw = width - (int)strlen(head) - (int)strlen(tail) - 5;
		if (barw > (int)sizeof(bar) - 1)
			barw = sizeof(bar) - 1;
		if (barw < 10)
			barw = 0;
		fill = (int)(frac * barw);
		for (k = 0; k < barw; k++)
			bar[k] = k < fill ? '#' : '-';
		bar[barw] = '\0';
		if (barw)
			fprintf(p->fp, "\r\033[K%s [%s] %s\n", head, bar, tail);
		else
			fprintf(p->fp, "\r\033[K%s %s\n", head, tail);
		drawn++;
		if (json_is_string(json_object_get(r, "error")) && *_str(r, "error", "")) {
			fprintf(p->fp, "\r\033[K        error: %.*s\n", width > 16 ? width - 16 : 1,
				_str(r, "error", ""));
			drawn++;
		}
	}
	/* Fewer lines than last time: blank the leftovers, then come back up. */
	for (k = drawn; k < p->lines; k++)
		fprintf(p->fp, "\r\033[K\n");
	if (p->lines > drawn)
		fprintf(p->fp, "\033[%dA", p->lines - drawn);
	p->lines = drawn;
	fflush(p->fp);
}
