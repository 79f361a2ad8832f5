/* xattr.c - see xattr.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#include "xattr.h"

int xattr_name(const char *ns, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(ns);
	/* "user" and "user." name the same namespace. */
	int n = snprintf(out, outlen, "%s%sstagehand.%s", ns, nl && ns[nl - 1] == '.' ? "" : ".",
			 name);

	return (nl == 0 || n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

int xattr_set_label(int fd, const char *ns, const char *name, const char *value,
		    char *err, size_t errlen)
{
	char full[128];

	if (xattr_name(ns, name, full, sizeof(full)) < 0) {
		snprintf(err, errlen, "label name '%s' + '%s' is empty or too long", ns, name);
		return -1;
	}
	if (fsetxattr(fd, full, value, strlen(value), 0) < 0) {
		int e = errno;

		snprintf(err, errlen, "cannot set %s=%s: %s%s", full, value, strerror(e),
			 e == ENOTSUP ? " (the filesystem does not support this xattr namespace)" :
			 e == EPERM ? " (trusted.* labels need root)" : "");
		return -1;
	}
	return 0;
}

ssize_t xattr_get_label(int fd, const char *ns, const char *name, char *buf, size_t buflen,
			char *err, size_t errlen)
{
	char full[128];
	ssize_t n;

	if (buflen == 0 || xattr_name(ns, name, full, sizeof(full)) < 0) {
		snprintf(err, errlen, "bad label buffer or name '%s'", name);
		return -1;
	}
	n = fgetxattr(fd, full, buf, buflen - 1);
	if (n < 0) {
		if (errno == ENODATA) {
			buf[0] = '\0';
			return 0;
		}
		snprintf(err, errlen, "cannot read %s: %s", full, strerror(errno));
		return -1;
	}
	buf[n] = '\0';
	return n;
}
