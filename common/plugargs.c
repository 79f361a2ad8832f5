/*
 * plugargs.c - strict parsing of the plugstack.conf arguments.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dclient.h"
#include "plugargs.h"

void plugargs_init(struct plugargs *a)
{
	memset(a, 0, sizeof(*a));
	a->fail_on_error = true;
	a->timeout_ms = 2000;
	a->end_timeout_ms = 300;
	a->spool_max = 20;
	snprintf(a->spool, sizeof(a->spool), "%s", PLUGARGS_DEFAULT_SPOOL);
	snprintf(a->xattr_ns, sizeof(a->xattr_ns), "%s", "user");
	snprintf(a->scratch, sizeof(a->scratch), "%s", PLUGARGS_DEFAULT_SCRATCH);
	a->max_script = 4u << 20;
}

/* Parse a decimal integer in [lo, hi]; the whole string must be a number. */
static int _int_in(const char *s, long lo, long hi, long *out)
{
	char *end;

	if (*s == '\0' || *s == '+' || *s == '-' || *s == ' ')
		return -1;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Copy an absolute path without '..' components into dst. */
static int _abs_path(const char *key, const char *v, char *dst, size_t dstlen,
		     char *err, size_t errlen)
{
	if (v[0] != '/') {
		snprintf(err, errlen, "%s=%s: must be an absolute path", key, v);
		return -1;
	}
	for (const char *p = v; (p = strstr(p, "..")) != NULL; p += 2) {
		bool start = (p == v || p[-1] == '/');
		bool end = (p[2] == '\0' || p[2] == '/');
		if (start && end) {
			snprintf(err, errlen, "%s=%s: '..' is not allowed", key, v);
			return -1;
		}
	}
	int n = snprintf(dst, dstlen, "%s", v);
	if (n < 0 || (size_t)n >= dstlen) {
		snprintf(err, errlen, "%s=%s: path longer than %zu bytes", key, v,
			 dstlen - 1);
		return -1;
	}
	return 0;
}

static int _one(struct plugargs *a, const char *word, char *err, size_t errlen)
{
	const char *eq = strchr(word, '=');
	long n;

	if (eq == NULL || eq == word) {
		snprintf(err, errlen, "'%s': expected key=value (keys: server, socket, conf, "
			 "on_error, timeout_ms, end_timeout_ms, spool, spool_max, xattr_ns, scratch, "
			 "max_script_kb)", word);
		return -1;
	}
	size_t klen = (size_t)(eq - word);
	const char *v = eq + 1;
#define KEY(s) (klen == sizeof(s) - 1 && strncmp(word, s, klen) == 0)
	if (*v == '\0') {
		snprintf(err, errlen, "'%s': empty value", word);
		return -1;
	}
	if (KEY("socket")) {
		a->server[0] = '\0';  /* the later of socket= and server= wins */
		return _abs_path("socket", v, a->socket, sizeof(a->socket), err, errlen);
	}
	if (KEY("server")) {
		struct dclient_target t;
		char e[512];

		if (dclient_target_server(&t, v, e, sizeof(e)) < 0) {
			snprintf(err, errlen, "server=%s: %s", v, e);
			return -1;
		}
		a->socket[0] = '\0';
		snprintf(a->server, sizeof(a->server), "%s", v);   /* fits: checked */
		return 0;
	}
	if (KEY("conf"))
		return _abs_path("conf", v, a->conf, sizeof(a->conf), err, errlen);
	if (KEY("spool"))
		return _abs_path("spool", v, a->spool, sizeof(a->spool), err, errlen);
	if (KEY("scratch"))
		return _abs_path("scratch", v, a->scratch, sizeof(a->scratch), err, errlen);
	if (KEY("on_error")) {
		if (strcmp(v, "fail") == 0)
			a->fail_on_error = true;
		else if (strcmp(v, "warn") == 0)
			a->fail_on_error = false;
		else {
			snprintf(err, errlen, "on_error=%s: must be 'fail' or 'warn'", v);
			return -1;
		}
		return 0;
	}
	if (KEY("timeout_ms") || KEY("end_timeout_ms")) {
		if (_int_in(v, 1, 60000, &n) < 0) {
			snprintf(err, errlen, "'%s': must be a whole number of "
				 "milliseconds from 1 to 60000", word);
			return -1;
		}
		if (KEY("timeout_ms"))
			a->timeout_ms = (int)n;
		else
			a->end_timeout_ms = (int)n;
		return 0;
	}
	if (KEY("spool_max")) {
		if (_int_in(v, 0, 10000, &n) < 0) {
			snprintf(err, errlen, "'%s': must be a number from 0 to 10000", word);
			return -1;
		}
		a->spool_max = (int)n;
		return 0;
	}
	if (KEY("max_script_kb")) {
		if (_int_in(v, 1, 1024 * 1024, &n) < 0) {
			snprintf(err, errlen, "'%s': must be a number of KiB from 1 to 1048576",
				 word);
			return -1;
		}
		a->max_script = (size_t)n * 1024u;
		return 0;
	}
	if (KEY("xattr_ns")) {
		/* user: the task labels as the job owner; trusted: root labels
		 * descriptors the owner opened (see privlabel.h). */
		if (strcmp(v, "user") != 0 && strcmp(v, "trusted") != 0) {
			snprintf(err, errlen, "xattr_ns=%s: must be 'user' or 'trusted' "
				 "(the same as XattrNamespace in stagehand.conf)", v);
			return -1;
		}
		snprintf(a->xattr_ns, sizeof(a->xattr_ns), "%s", v);
		return 0;
	}
#undef KEY
	snprintf(err, errlen, "unknown argument '%.*s' (keys: server, socket, conf, "
		 "on_error, timeout_ms, end_timeout_ms, spool, spool_max, xattr_ns, scratch, "
		 "max_script_kb)", (int)klen, word);
	return -1;
}

int plugargs_parse(struct plugargs *a, int ac, char **av, char *err, size_t errlen)
{
	for (int i = 0; i < ac; i++) {
		if (av[i] == NULL)
			continue;
		if (_one(a, av[i], err, errlen) < 0)
			return -1;
	}
	return 0;
}
