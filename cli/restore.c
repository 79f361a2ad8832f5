/*
 * restore.c - 'stagehand restore': bring files back from an archive copy.
 *
 * Offline (no daemon): reads the archive with the invoking user's own
 * identity and writes into a destination directory. The restore itself
 * (both layouts, the checks of the index and the bundles, the writes that
 * follow nothing) is common/restore.c, which the daemon's stage-in of an
 * archive runs too; this file is the command around it.
 *
 * ARCHIVED_PATH may also be the scratch directory that was archived: its
 * user.stagehand.location label names the archive, and the files come back
 * into that directory unless --to says otherwise.
 *
 * Exit status: 0 everything asked for was restored and verified, 1 some
 * entry failed (message per entry), 2 usage or environment error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "commands.h"
#include "restore.h"
#include "xattr.h"

static void _err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A usage or environment error, before the restore starts. */
static void _err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stagehand restore: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand restore ARCHIVED_PATH [--to DIR] [--file RELPATH]... [--force] [-v]\n"
		"\n"
		"Bring files back from an archive copy, as yourself, verifying each one.\n"
		"ARCHIVED_PATH is the archive copy (bundled or plain), or the scratch\n"
		"directory that was archived (found through its stagehand.location label).\n"
		"\n"
		"  --to DIR          write here (default: the scratch directory when\n"
		"                    ARCHIVED_PATH is one, else the current directory)\n"
		"  --file RELPATH    restore only this file or directory (relative to the\n"
		"                    archived tree); may be given several times\n"
		"  --force           replace files that already exist at the destination\n"
		"  -v, --verbose     print each restored path\n"
		"  --help            show this help\n"
		"\n"
		"Exit status: 0 all restored and verified, 1 some entry failed, 2 usage or\n"
		"environment error. See stagehand(1), RESTORE.\n");
}

/* ---- what the restore tells ---- */

static void _on_error(void *arg, const char *rel, const char *msg)
{
	(void)arg;
	(void)rel;
	fprintf(stderr, "stagehand restore: %s\n", msg);
}

static void _on_skip(void *arg, const char *rel, const char *why)
{
	const struct restore *r = arg;

	fprintf(stderr, "stagehand restore: %s/%s: skipped (%s)\n", r->archive, rel, why);
}

static void _on_file(void *arg, const char *out, int64_t size, int64_t mtime_ns, uint32_t mode,
		     const char *cks)
{
	(void)arg;
	(void)size;
	(void)mtime_ns;
	(void)mode;
	(void)cks;
	printf("%s\n", out);
}

static void _on_link(void *arg, const char *out, const char *target)
{
	(void)arg;
	printf("%s -> %s\n", out, target);
}

/* ---- command ---- */

/* The archive location labelled on a scratch directory; "" when none. */
static void _label_location(int fd, char *loc, size_t len, char *policy, size_t plen)
{
	static const char *const ns[] = { "user.", "trusted.", NULL };
	char err[256];

	loc[0] = policy[0] = '\0';
	for (int i = 0; ns[i]; i++)
		if (xattr_get_label(fd, ns[i], XATTR_LOCATION, loc, len, err, sizeof(err)) > 0) {
			xattr_get_label(fd, ns[i], XATTR_POLICY, policy, plen, err, sizeof(err));
			return;
		}
	loc[0] = '\0';
}

static char *_normalise_file(const char *f)
{
	char *s;
	size_t n;

	while (f[0] == '.' && f[1] == '/')
		f += 2;
	s = strdup(f);
	if (!s)
		return NULL;
	n = strlen(s);
	while (n > 1 && s[n - 1] == '/')
		s[--n] = '\0';
	return s;
}

/* One --file RELPATH added to r->files: 0, or -1 (its message shown unless out of memory). */
static int _restore_add_file(struct restore *r, const char *arg)
{
	char **nf = realloc(r->files, (size_t)(r->nfiles + 1) * sizeof(*nf));
	const char *why;

	if (!nf)
		return -1;
	r->files = nf;
	r->files[r->nfiles] = _normalise_file(arg);
	if (!r->files[r->nfiles])
		return -1;
	if ((why = bundle_unsafe_name(r->files[r->nfiles])) != NULL) {
		_err("--file '%s': %s; give a path relative to the archived tree", arg, why);
		free(r->files[r->nfiles]);
		return -1;
	}
	r->nfiles++;
	return 0;
}

/* The command line into r, *to (--to) and *path: 0 go on, 1 help shown, 2 an error shown. */
static int _restore_args(int argc, char **argv, struct restore *r, const char **to,
			 const char **path)
{
	static const struct option lo[] = {
		{ "to", required_argument, NULL, 't' },
		{ "file", required_argument, NULL, 'f' },
		{ "force", no_argument, NULL, 'F' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hvt:f:", lo, NULL)) != -1) {
		switch (c) {
		case 't': *to = optarg; break;
		case 'v':
			r->on_file = _on_file;
			r->on_link = _on_link;
			break;
		case 'F': r->force = 1; break;
		case 'h': _usage(stdout); return 1;
		case 'f':
			if (_restore_add_file(r, optarg) < 0)
				return 2;
			break;
		default:
			_err("unknown or incomplete option '%s' (see 'stagehand restore --help')",
			     argv[optind - 1]);
			return 2;
		}
	}
	if (optind != argc - 1) {
		_usage(stderr);
		return 2;
	}
	*path = argv[optind];
	return 0;
}

/*
 * The archive copy to restore from: path itself, or the archive copy its
 * label names (r->archive is then loc, which must outlive r). *to defaults
 * to path, or to "." for an archive copy given as it is. 0, or -1 shown.
 */
static int _restore_source(struct restore *r, const char *path, const char **to, char *loc,
			   size_t loclen)
{
	char policy[64];
	struct stat ast;
	int pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (pfd < 0) {
		_err("cannot open %s: %s%s", path, strerror(errno), errno == ENOTDIR ?
		     " (give the archived directory and --file RELPATH for one file)" : "");
		return -1;
	}
	_label_location(pfd, loc, loclen, policy, sizeof(policy));
	if (loc[0]) {
		if (strcmp(policy, "archived") != 0)
			fprintf(stderr, "stagehand restore: note: %s is labelled '%s', not 'archived': "
				"its archive copy may be incomplete\n", path, policy[0] ? policy : "?");
		r->archive = loc;
		r->afd = open(loc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		close(pfd);
		if (r->afd < 0) {
			_err("%s names its archive copy %s, which cannot be opened: %s", path, loc,
			     strerror(errno));
			return -1;
		}
		if (!*to)
			*to = path;
	} else {
		r->archive = path;
		r->afd = pfd;
		if (!*to)
			*to = ".";
	}
	if (fstat(r->afd, &ast) < 0)
		return -1;
	if (geteuid() == 0 && ast.st_uid != 0) {
		_err("%s belongs to uid %u: run restore as that user, not as root (e.g. "
		     "runuser -u USER -- stagehand restore ...); root does not write user paths",
		     r->archive, (unsigned)ast.st_uid);
		return -1;
	}
	return 0;
}

/* The destination to, made if missing, opened into r->dfd; never the archive copy. 0, or -1 shown. */
static int _restore_dest(struct restore *r, const char *to)
{
	struct stat ast, dst;

	r->dest = to;
	if (mkdir(to, 0777) < 0 && errno != EEXIST) {
		_err("cannot create destination %s: %s (its parent must exist)", to,
		     strerror(errno));
		return -1;
	}
	r->dfd = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->dfd < 0 || fstat(r->dfd, &dst) < 0) {
		_err("cannot open destination %s: %s", to, strerror(errno));
		return -1;
	}
	if (fstat(r->afd, &ast) < 0)
		return -1;
	if (dst.st_dev == ast.st_dev && dst.st_ino == ast.st_ino) {
		_err("the destination %s is the archive copy itself: give --to DIR", to);
		return -1;
	}
	return 0;
}

int cmd_restore(int argc, char **argv)
{
	struct restore r;
	char loc[BUNDLE_PATH_MAX];
	const char *to = NULL, *path = NULL;
	int rc;

	restore_init(&r);
	r.arg = &r;
	r.on_error = _on_error;
	r.on_skip = _on_skip;
	rc = _restore_args(argc, argv, &r, &to, &path);
	if (rc == 1) {
		rc = 0;
		goto out;
	}
	if (rc || _restore_source(&r, path, &to, loc, sizeof(loc)) < 0 ||
	    _restore_dest(&r, to) < 0) {
		rc = 2;
		goto out;
	}
	if (restore_open(&r) < 0) {
		/* No index yet: an incomplete archive (environment), not a refused one. */
		rc = r.bfd >= 0 && faccessat(r.bfd, BUNDLE_INDEX_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0 ?
		     2 : 1;
		goto out;
	}
	restore_run(&r);
	printf("stagehand restore: %ld file%s (%lld bytes), %ld symlink%s, %ld director%s restored "
	       "from %s into %s%s\n", r.restored_files, r.restored_files == 1 ? "" : "s", r.bytes,
	       r.restored_links, r.restored_links == 1 ? "" : "s", r.restored_dirs,
	       r.restored_dirs == 1 ? "y" : "ies", r.archive, to, r.errors ? "; some failed" : "");
	if (r.errors)
		fprintf(stderr, "stagehand restore: %ld error%s (see above)\n", r.errors,
			r.errors == 1 ? "" : "s");
	rc = r.errors ? 1 : 0;
out:
	restore_free(&r);
	for (int i = 0; i < r.nfiles; i++)
		free(r.files[i]);
	free(r.files);
	if (r.dfd >= 0)
		close(r.dfd);
	if (r.afd >= 0)
		close(r.afd);
	return rc;
}
