/* labels.c - see labels.h. */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "client.h"
#include "conf.h"
#include "labels.h"
#include "xattr.h"

int labels_policy_known(const char *p)
{
	return !strcmp(p, "exempt") || !strcmp(p, "pending") || !strcmp(p, "archive") ||
	       !strcmp(p, "archived") || !strcmp(p, "skipped") || !strcmp(p, "purge");
}

int labels_namespace(const char *opt, char *out, size_t outlen)
{
	const char *path = client_opt_config ? client_opt_config : getenv("STAGEHAND_CONF");
	int explicit_path = path && *path;
	struct conf *c;
	char err[1024];

	if (opt) {
		if (!strcmp(opt, "user") || !strcmp(opt, "user.")) {
			snprintf(out, outlen, "user.");
			return 0;
		}
		if (!strcmp(opt, "trusted") || !strcmp(opt, "trusted.")) {
			snprintf(out, outlen, "trusted.");
			return 0;
		}
		client_errx("--namespace %s: must be 'user.' or 'trusted.'", opt);
		return -1;
	}
	snprintf(out, outlen, "user.");
	if (!explicit_path)
		path = CONF_DEFAULT_FILE;
	if (access(path, R_OK) != 0) {
		if (explicit_path) {
			client_errx("cannot read config file %s: %s (fix --config / STAGEHAND_CONF, "
				    "or give --namespace)", path, strerror(errno));
			return -1;
		}
		if (errno != ENOENT)
			fprintf(stderr, "stagehand: note: cannot read %s (%s): assuming "
				"XattrNamespace=user; give --namespace trusted. if your site uses "
				"trusted labels\n", path, strerror(errno));
		return 0;
	}
	c = conf_create();
	if (!c) {
		client_errx("out of memory");
		return -1;
	}
	if (conf_parse_file(c, path, err, sizeof(err)) < 0) {
		client_errx("%s (or give --namespace)", err);
		conf_destroy(c);
		return -1;
	}
	snprintf(out, outlen, "%s", conf_xattr_prefix(c));
	conf_destroy(c);
	return 0;
}

/* One label by path, no-follow. 1 read, 0 absent, -1 error. */
static int _get(const char *path, const char *ns, const char *name, char *buf, size_t len,
		char *err, size_t errlen)
{
	char full[128];
	ssize_t n;

	if (xattr_name(ns, name, full, sizeof(full)) < 0) {
		snprintf(err, errlen, "label name %s%s is too long", ns, name);
		return -1;
	}
	n = lgetxattr(path, full, buf, len - 1);
	if (n < 0) {
		buf[0] = '\0';
		if (errno == ENODATA || errno == ENOTSUP || errno == EPERM)
			return 0;	/* EPERM: user.* on a symlink or special file */
		if (errno == ERANGE) {
			snprintf(err, errlen, "%s: label %s is longer than %zu bytes", path, full,
				 len - 1);
			return -1;
		}
		snprintf(err, errlen, "%s: cannot read label %s: %s", path, full, strerror(errno));
		return -1;
	}
	buf[n] = '\0';
	if (memchr(buf, '\0', (size_t)n))
		buf[strlen(buf)] = '\0';	/* a value with a NUL is shown up to it */
	return 1;
}

int labels_read(const char *path, const char *ns, struct label *l, char *err, size_t errlen)
{
	int a, b, c, d;

	memset(l, 0, sizeof(*l));
	if ((a = _get(path, ns, XATTR_POLICY, l->policy, sizeof(l->policy), err, errlen)) < 0 ||
	    (b = _get(path, ns, XATTR_JOB, l->job, sizeof(l->job), err, errlen)) < 0 ||
	    (c = _get(path, ns, XATTR_OWNER, l->owner, sizeof(l->owner), err, errlen)) < 0 ||
	    (d = _get(path, ns, XATTR_LOCATION, l->location, sizeof(l->location), err, errlen)) < 0)
		return -1;
	return (a || b || c || d) ? 1 : 0;
}

int labels_root(const char *in, char *out, size_t outlen, char *err, size_t errlen)
{
	struct stat st;
	char *rp;

	if (lstat(in, &st) < 0) {
		snprintf(err, errlen, "%s: %s", in, strerror(errno));
		return -1;
	}
	if (S_ISLNK(st.st_mode)) {
		snprintf(err, errlen, "%s is a symbolic link: stagehand does not follow links; "
			 "give the directory it points to", in);
		return -1;
	}
	rp = realpath(in, NULL);
	if (!rp) {
		snprintf(err, errlen, "%s: %s", in, strerror(errno));
		return -1;
	}
	if (snprintf(out, outlen, "%s", rp) >= (int)outlen) {
		snprintf(err, errlen, "%s: path longer than %zu bytes", in, outlen - 1);
		free(rp);
		return -1;
	}
	free(rp);
	return 0;
}

/* nftw has no user pointer: one walk at a time. */
static labels_walk_fn _walk_fn;
static void *_walk_arg;
static int _walk_stopped;

static int _walk_cb(const char *path, const struct stat *st, int type, struct FTW *f)
{
	char err[512];
	int rc;

	switch (type) {
	case FTW_NS:
		snprintf(err, sizeof(err), "%s: cannot stat: %s", path, strerror(errno));
		rc = _walk_fn(path, NULL, f->level, err, _walk_arg);
		break;
	case FTW_DNR:
		snprintf(err, sizeof(err), "%s: cannot read directory: %s", path, strerror(errno));
		rc = _walk_fn(path, NULL, f->level, err, _walk_arg);
		/* The directory itself is there: report its own labels too. */
		if (rc == 0)
			rc = _walk_fn(path, st, f->level, NULL, _walk_arg);
		break;
	default:
		rc = _walk_fn(path, st, f->level, NULL, _walk_arg);
	}
	if (rc < 0) {
		_walk_stopped = 1;
		return FTW_STOP;
	}
	if (rc == 1 && type == FTW_D)
		return FTW_SKIP_SUBTREE;
	return FTW_CONTINUE;
}

int labels_walk(const char *root, int one_fs, labels_walk_fn fn, void *arg)
{
	int flags = FTW_PHYS | FTW_ACTIONRETVAL | (one_fs ? FTW_MOUNT : 0);

	_walk_fn = fn;
	_walk_arg = arg;
	_walk_stopped = 0;
	if (nftw(root, _walk_cb, 64, flags) != 0 && !_walk_stopped) {
		char err[512];

		snprintf(err, sizeof(err), "%s: cannot walk: %s", root, strerror(errno));
		fn(root, NULL, 0, err, arg);
	}
	return _walk_stopped ? -1 : 0;
}

struct http *labels_connect(void)
{
	return client_connect(client_opt_socket, client_opt_server, client_opt_config);
}

const char *labels_human(unsigned long long n, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", n);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* Length of a valid UTF-8 sequence at p, or 0. */
static int _utf8_len(const unsigned char *p)
{
	int n, i;
	unsigned cp;

	if (p[0] < 0x80)
		return 1;
	if ((p[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = p[0] & 0x0f;
	} else if ((p[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	for (i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void labels_print_safe(FILE *fp, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		int n = _utf8_len(p);

		if (n == 1 && *p >= 0x20 && *p != 0x7f) {
			fputc(*p, fp);
		} else if (n > 1) {
			fwrite(p, 1, (size_t)n, fp);
		} else {
			fprintf(fp, "\\x%02x", *p);
			n = 1;
		}
		p += n;
	}
}

void labels_put_json(struct json_t *doc)
{
	char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (s)
		puts(s);
	free(s);
	json_decref(doc);
}

struct json_t *labels_jstr(const char *s)
{
	json_t *j;
	char *esc;
	size_t o = 0;

	if (!s)
		return json_null();
	j = json_string(s);
	if (j)
		return j;
	esc = malloc(strlen(s) * 4 + 1);
	if (!esc)
		return json_null();
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = _utf8_len(p);

		if (n >= 1 && *p != 0) {
			memcpy(esc + o, p, (size_t)n);
			o += (size_t)n;
			p += n;
		} else {
			snprintf(esc + o, 5, "\\x%02x", *p);
			o += 4;
			p++;
		}
	}
	esc[o] = '\0';
	j = json_string(esc);
	free(esc);
	return j ? j : json_null();
}
