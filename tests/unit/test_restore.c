/*
 * test_restore.c - common/restore.c, the restore 'stagehand restore' and the
 * daemon's stage-in of an archive share: a bundled archive made here with
 * the project's own tar and index writers, restored whole, as one
 * subdirectory or one file under another name (the daemon's rename); a
 * member changed in its bundle; a plain archive checked against the
 * checksums recorded when it was archived (changed, missing and added
 * files); hostile input (a link planted at the destination, link members,
 * index lines naming '../' or absolute paths or a huge size) that must
 * leave nothing outside the destination.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "checksum.h"
#include "restore.h"
#include "tar.h"
#include "tests/tap.h"

static char _top[] = "/tmp/test_restore.XXXXXX";
static char _errors[4096];

struct _member {
	const char *path, *data, *link;   /* link: a symlink's target */
};

static void _put(const char *path, const char *data)
{
	FILE *f = fopen(path, "w");

	fputs(data, f);
	fclose(f);
}

static void _cks(const char *data, size_t n, char out[CKSUM_HEX_MAX])
{
	struct cksum c;

	cksum_init(&c, CKSUM_XXH128);
	cksum_update(&c, data, n);
	cksum_final(&c, out);
}

/* ARCH/.stagehand-bundles with one bundle of members and its index. */
static void _bundled(const char *arch, const struct _member *m, size_t n, const char **dirs)
{
	char p[512], tar[65536], bcks[CKSUM_HEX_MAX], err[200];
	struct bundle_header h = { .algo = CKSUM_XXH128, .source = "/s", .dest = arch };
	size_t len = 0;
	int64_t offs[16];
	FILE *f;
	char *line;

	mkdir(arch, 0700);
	snprintf(p, sizeof(p), "%s/%s", arch, BUNDLE_DIR);
	mkdir(p, 0700);
	memset(tar, 0, sizeof(tar));
	for (size_t i = 0; i < n; i++) {
		struct tar_member t = { .path = m[i].path, .linkname = m[i].link,
					.type = m[i].link ? TAR_SYMLINK : TAR_REG,
					.size = m[i].link ? 0 : strlen(m[i].data), .mode = 0644,
					.mtime_ns = 1700000000000000000LL };

		len += tar_header_encode(&t, tar + len, sizeof(tar) - len, err, sizeof(err));
		offs[i] = (int64_t)len;
		if (!m[i].link) {
			memcpy(tar + len, m[i].data, t.size);
			len += t.size + tar_pad(t.size);
		}
	}
	len += TAR_END_BYTES;
	_cks(tar, len, bcks);
	snprintf(p, sizeof(p), "%s/%s/bundle-000001.tar", arch, BUNDLE_DIR);
	f = fopen(p, "w");
	fwrite(tar, 1, len, f);
	fclose(f);
	snprintf(p, sizeof(p), "%s/%s/%s", arch, BUNDLE_DIR, BUNDLE_INDEX_NAME);
	f = fopen(p, "w");
	line = bundle_header_line(&h);
	fputs(line, f);
	free(line);
	line = bundle_bundle_line(1, (int64_t)len, bcks, (int64_t)n);
	fputs(line, f);
	free(line);
	for (size_t i = 0; dirs && dirs[i]; i++) {
		struct bundle_line e = { .type = BUNDLE_L_ENTRY, .path = (char *)dirs[i],
					 .kind = BUNDLE_K_DIR, .mode = 0755, .mtime_ns = -1 };

		line = bundle_entry_line(&e);
		fputs(line, f);
		free(line);
	}
	for (size_t i = 0; i < n; i++) {
		struct bundle_line e = { .type = BUNDLE_L_ENTRY, .path = (char *)m[i].path,
					 .target = (char *)m[i].link,
					 .kind = m[i].link ? BUNDLE_K_LINK : BUNDLE_K_FILE, .num = 1,
					 .offset = offs[i], .mode = 0644, .mtime_ns = -1 };

		if (!m[i].link) {
			e.size = (int64_t)strlen(m[i].data);
			_cks(m[i].data, strlen(m[i].data), e.cks);
		}
		line = bundle_entry_line(&e);
		fputs(line, f);
		free(line);
	}
	fclose(f);
}

static void _on_error(void *arg, const char *rel, const char *msg)
{
	(void)arg;
	(void)rel;
	snprintf(_errors + strlen(_errors), sizeof(_errors) - strlen(_errors), "%s\n", msg);
}

/*
 * Restore arch into dest: files[0] = sel (NULL: everything), renamed to
 * rename when not NULL. The restore's result (-1 when restore_open refused).
 */
static int _restore(const char *arch, const char *dest, char *sel, const char *rename,
		    const struct restore_known *known, size_t nknown, enum restore_kind *kind)
{
	struct restore r;
	int rc;

	_errors[0] = '\0';
	mkdir(dest, 0700);
	restore_init(&r);
	r.archive = arch;
	r.dest = dest;
	r.afd = open(arch, O_RDONLY | O_DIRECTORY);
	r.dfd = open(dest, O_RDONLY | O_DIRECTORY);
	r.on_error = _on_error;
	r.known = known;
	r.nknown = nknown;
	if (sel) {
		r.files = &sel;
		r.nfiles = 1;
		r.rename = rename;
	}
	rc = restore_open(&r);
	if (rc >= 0) {
		if (kind)
			*kind = restore_kind(&r, sel ? sel : "");
		rc = restore_run(&r);
	}
	restore_free(&r);
	close(r.afd);
	close(r.dfd);
	return rc;
}

static char *_read(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int _exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void _test_bundled(void)
{
	static const struct _member m[] = {
		{ "a.txt", "alpha\n", NULL },
		{ "sub/b.txt", "beta\n", NULL },
		{ "sub/file.dat", "1\n2\n3\n", NULL },
	};
	static const char *dirs[] = { "sub", NULL };
	char arch[256], dest[256], p[512], *r;
	enum restore_kind k;

	snprintf(arch, sizeof(arch), "%s/bundled", _top);
	_bundled(arch, m, 3, dirs);
	snprintf(dest, sizeof(dest), "%s/all", _top);
	ok(_restore(arch, dest, NULL, NULL, NULL, 0, &k) == 0, "a bundled archive restores: %s",
	   _errors);
	snprintf(p, sizeof(p), "%s/sub/file.dat", dest);
	is_str(_read(p), "1\n2\n3\n", "its bundled file comes back");
	snprintf(p, sizeof(p), "%s/%s", dest, BUNDLE_DIR);
	ok(!_exists(p), "and not the bundles or the index");

	/* One subdirectory, as the destination itself (the daemon's tree stage-in). */
	snprintf(dest, sizeof(dest), "%s/part", _top);
	ok(_restore(arch, dest, "sub", "", NULL, 0, &k) == 0 && k == RESTORE_DIR,
	   "a subdirectory restores alone, as a tree: %s", _errors);
	snprintf(p, sizeof(p), "%s/b.txt", dest);
	r = _read(p);
	is_str(r ? r : "(none)", "beta\n", "its files land at the destination's top");
	snprintf(p, sizeof(p), "%s/a.txt", dest);
	ok(!_exists(p), "nothing outside the selection");

	/* One bundled file under another name (to=one.dat). */
	snprintf(dest, sizeof(dest), "%s/one", _top);
	ok(_restore(arch, dest, "sub/file.dat", "one.dat", NULL, 0, &k) == 0 &&
	   k == RESTORE_FILE, "a bundled file restores alone, renamed: %s", _errors);
	snprintf(p, sizeof(p), "%s/one.dat", dest);
	r = _read(p);
	is_str(r ? r : "(none)", "1\n2\n3\n", "with its content");
	snprintf(p, sizeof(p), "%s/sub", dest);
	ok(!_exists(p), "and no directory of the archive around it");
}

static void _test_damaged_member(void)
{
	static const struct _member m[] = {
		{ "a.txt", "alpha\n", NULL },
		{ "sub/b.txt", "beta\n", NULL },
	};
	char arch[256], dest[256], p[512];
	int fd;

	snprintf(arch, sizeof(arch), "%s/damaged", _top);
	_bundled(arch, m, 2, NULL);
	/* Second member's data: after a.txt's header and block, and its own header. */
	snprintf(p, sizeof(p), "%s/%s/bundle-000001.tar", arch, BUNDLE_DIR);
	fd = open(p, O_WRONLY);
	ok(pwrite(fd, "B", 1, 3 * TAR_BLOCK) == 1, "a byte of sub/b.txt changed in its bundle");
	close(fd);
	snprintf(dest, sizeof(dest), "%s/damaged-out", _top);
	ok(_restore(arch, dest, NULL, NULL, NULL, 0, NULL) < 0, "the restore fails");
	contains(_errors, "sub/b.txt: checksum mismatch in bundle-000001.tar at offset 1536",
		 "the error names the file and where it lies");
	contains(_errors, "recorded when it was archived", "and says what it was compared with");
	snprintf(p, sizeof(p), "%s/sub/b.txt", dest);
	ok(!_exists(p), "the damaged file is not written");
	snprintf(p, sizeof(p), "%s/a.txt", dest);
	ok(_exists(p), "the intact one is");
}

static void _test_plain_known(void)
{
	char arch[256], dest[256], p[512];
	struct restore_known k[3];

	snprintf(arch, sizeof(arch), "%s/plain", _top);
	mkdir(arch, 0700);
	snprintf(p, sizeof(p), "%s/sub", arch);
	mkdir(p, 0700);
	snprintf(p, sizeof(p), "%s/a.txt", arch);
	_put(p, "alpha\n");
	snprintf(p, sizeof(p), "%s/sub/b.txt", arch);
	_put(p, "beta\n");
	k[0] = (struct restore_known){ .path = "a.txt", .size = 6 };
	_cks("alpha\n", 6, k[0].cks);
	k[1] = (struct restore_known){ .path = "sub/b.txt", .size = 5 };
	_cks("beta\n", 5, k[1].cks);
	snprintf(dest, sizeof(dest), "%s/plain-out", _top);
	ok(_restore(arch, dest, NULL, NULL, k, 2, NULL) == 0, "a plain archive that matches "
	   "its record restores: %s", _errors);

	snprintf(p, sizeof(p), "%s/sub/b.txt", arch);
	_put(p, "Beta\n");	/* same size, other bytes */
	snprintf(dest, sizeof(dest), "%s/plain-changed", _top);
	ok(_restore(arch, dest, NULL, NULL, k, 2, NULL) < 0, "a changed file fails the restore");
	contains(_errors, "sub/b.txt: checksum mismatch in the archive copy (recorded when it "
		 "was archived", "against the checksum recorded when it was archived");
	snprintf(p, sizeof(p), "%s/sub/b.txt", dest);
	ok(!_exists(p), "the changed file is not written");

	snprintf(p, sizeof(p), "%s/sub/b.txt", arch);
	_put(p, "beta\n");
	snprintf(p, sizeof(p), "%s/extra.txt", arch);
	_put(p, "x\n");
	k[2] = (struct restore_known){ .path = "z.txt", .size = 1 };
	_cks("z", 1, k[2].cks);
	snprintf(dest, sizeof(dest), "%s/plain-extra", _top);
	ok(_restore(arch, dest, NULL, NULL, k, 3, NULL) < 0, "added and missing files fail it");
	contains(_errors, "extra.txt: no checksum was recorded", "the added file is named");
	contains(_errors, "z.txt: archived, but missing", "the missing file is named");
}

static void _test_hostile(void)
{
	/* A symlink member to the outside, then a file below its name. */
	static const struct _member m[] = {
		{ "esc", NULL, "/tmp" },
		{ "esc2/x", "owned\n", NULL },
		{ "link", NULL, ".." },
	};
	char arch[256], dest[256], p[512], outside[256];

	snprintf(arch, sizeof(arch), "%s/hostile", _top);
	snprintf(outside, sizeof(outside), "%s/outside", _top);
	mkdir(outside, 0700);
	_bundled(arch, m, 3, NULL);
	snprintf(dest, sizeof(dest), "%s/hostile-out", _top);
	/* A symlink in place at the destination first: nothing is written through it. */
	mkdir(dest, 0700);
	snprintf(p, sizeof(p), "%s/esc2", dest);
	ok(symlink(outside, p) == 0, "a planted link at the destination");
	ok(_restore(arch, dest, NULL, NULL, NULL, 0, NULL) < 0, "the restore reports it");
	contains(_errors, "symlink or not a directory: refused", "as a refusal to follow");
	snprintf(p, sizeof(p), "%s/x", outside);
	ok(!_exists(p), "nothing is written through it");
	snprintf(p, sizeof(p), "%s/esc", dest);
	ok(_exists(p), "a link member is made as a link, never followed");
}

/* An index line written by hand in place of the last one: refused before anything is written. */
static void _test_hostile_index(void)
{
	static const struct _member m[] = { { "a.txt", "alpha\n", NULL } };
	static const char *const bad[] = {
		"{\"path\":\"../evil\",\"type\":\"file\",\"bundle\":\"bundle-000001.tar\","
		"\"offset\":512,\"size\":6,\"mode\":420,\"mtime_ns\":0,\"checksum\":\"xxh128:"
		"00000000000000000000000000000000\"}",
		"{\"path\":\"/tmp/evil\",\"type\":\"file\",\"bundle\":\"bundle-000001.tar\","
		"\"offset\":512,\"size\":6,\"mode\":420,\"mtime_ns\":0,\"checksum\":\"xxh128:"
		"00000000000000000000000000000000\"}",
		"{\"path\":\"a.txt\",\"type\":\"file\",\"bundle\":\"bundle-000001.tar\","
		"\"offset\":512,\"size\":9223372036854775000,\"mode\":420,\"mtime_ns\":0,"
		"\"checksum\":\"xxh128:00000000000000000000000000000000\"}",
	};
	char arch[256], dest[256], p[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f;
		long end;

		snprintf(arch, sizeof(arch), "%s/hostile-index-%zu", _top, i);
		_bundled(arch, m, 1, NULL);
		/* Replace the entry line (the last) with the hostile one. */
		snprintf(p, sizeof(p), "%s/%s/%s", arch, BUNDLE_DIR, BUNDLE_INDEX_NAME);
		f = fopen(p, "r+");
		fseek(f, 0, SEEK_END);
		end = ftell(f);
		{
			char *t = malloc((size_t)end + 1), *nl;

			rewind(f);
			end = (long)fread(t, 1, (size_t)end, f);
			t[end] = '\0';
			nl = strrchr(t, '\n');
			*nl = '\0';
			nl = strrchr(t, '\n');
			nl[1] = '\0';
			fclose(f);
			f = fopen(p, "w");
			fprintf(f, "%s%s\n", t, bad[i]);
			free(t);
		}
		fclose(f);
		snprintf(dest, sizeof(dest), "%s/hostile-index-out-%zu", _top, i);
		ok(_restore(arch, dest, NULL, NULL, NULL, 0, NULL) < 0 &&
		   strstr(_errors, "the index is damaged or not trustworthy; nothing was restored"),
		   "hostile index line %zu refused whole: %s", i, _errors);
		snprintf(p, sizeof(p), "%s/a.txt", dest);
		ok(!_exists(p), "and nothing written");
	}
	ok(!_exists("/tmp/evil"), "no absolute name written");
	snprintf(p, sizeof(p), "%s/evil", _top);
	ok(!_exists(p), "no name above the destination written");
}

int main(void)
{
	if (!mkdtemp(_top)) {
		perror("mkdtemp");
		return 1;
	}
	umask(022);
	_test_bundled();
	_test_damaged_member();
	_test_plain_known();
	_test_hostile();
	_test_hostile_index();
	tap_rmtree(_top);
	return tap_done();
}
