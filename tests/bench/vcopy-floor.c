/* vcopy-floor - the least a verified, durable copy of many small files costs.
 *
 * The small-file counterpart of daemon-bench's fio verified-copy ceiling: not
 * a copier anyone should use, but the floor under any copier that ends each
 * file durable and read back from the device equal to its source.  It does
 * only that work, with nothing stagehandd needs besides: no temporary names
 * and renames, no checksums (the read-back is compared with the source's
 * bytes kept in memory), no records, no pacing, no xattrs, no counting walk.
 *
 *   vcopy-floor [-r] [-t THREADS] [-b BATCH] SRC DEST
 *
 * SRC is walked once (directories recreated under DEST, which must not
 * exist); its regular files, at most 1 MiB each, are then shared by THREADS
 * threads (default: the online CPUs) in batches of BATCH (default 512).  For
 * each batch a thread reads each source, creates its copy under its final
 * name with the source's mode, writes it and sets its times (as rsync -a
 * does); then syncfs(2) of DEST's file system; then reads each copy back
 * with O_DIRECT (from the device, not the page cache) and compares.  With
 * -r each copy is written under a temporary name and renamed to its own
 * after the batch's sync, as rsync and stagehandd do, so that no file is
 * ever seen under its name incomplete (then the sync before the read-back
 * also makes the renames durable).  The
 * directories' times are set and each directory fsync'ed at the end.
 * Prints "files N bytes B seconds S" on stdout; exit 0, or 1 with the first
 * failing call and its errno on stderr.
 *
 * Written here, not taken from a package: the point is a copier with nothing
 * in it but the calls such a copy cannot do without, so that its time is a
 * floor; a general tool does more.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILE (1 << 20)

struct dir {
	int src, dst;                 /* descriptors, open for the whole copy */
	struct timespec times[2];     /* the source directory's atime, mtime */
};

struct file {
	int dir;                      /* index into dirs */
	char *name;
};

static struct dir *dirs;
static size_t ndirs, capdirs;
static struct file *files;
static size_t nfiles, capfiles;
static size_t batch = 512;
static int renames;              /* -r */
static size_t next_file;         /* next batch's first file, under lock */
static unsigned long long total_bytes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fputs("vcopy-floor: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", strerror(e));
	exit(1);
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 1024;
	p = realloc(p, *cap * size);
	if (!p)
		die("realloc");
	return p;
}

/* Walk the source directory dirs[d], recreating its subdirectories. */
static void walk(size_t d, const char *path)
{
	int fd = dup(dirs[d].src);
	DIR *dp;
	struct dirent *de;

	if (fd < 0 || !(dp = fdopendir(fd)))
		die("opendir %s", path);
	while ((errno = 0, de = readdir(dp))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type == DT_REG) {     /* no stat: the copy's fstat reads its size */
			st.st_mode = S_IFREG;
			st.st_size = 0;
		} else if (fstatat(dirs[d].src, de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			die("fstatat %s/%s", path, de->d_name);
		if (S_ISDIR(st.st_mode)) {
			char sub[4096];
			size_t n;

			snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
			dirs = grow(dirs, &capdirs, ndirs, sizeof(*dirs));
			n = ndirs++;
			if (mkdirat(dirs[d].dst, de->d_name, st.st_mode & 07777))
				die("mkdir %s (copy)", sub);
			dirs[n].src = openat(dirs[d].src, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			dirs[n].dst = openat(dirs[d].dst, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (dirs[n].src < 0 || dirs[n].dst < 0)
				die("open %s", sub);
			dirs[n].times[0] = st.st_atim;
			dirs[n].times[1] = st.st_mtim;
			walk(n, sub);
		} else if (S_ISREG(st.st_mode)) {
			if (st.st_size > MAX_FILE) {
				errno = EFBIG;
				die("%s/%s is over 1 MiB: this floor is for small files", path, de->d_name);
			}
			files = grow(files, &capfiles, nfiles, sizeof(*files));
			files[nfiles].dir = (int)d;
			if (!(files[nfiles].name = strdup(de->d_name)))
				die("strdup");
			nfiles++;
		}
	}
	if (errno)
		die("readdir %s", path);
	closedir(dp);
}

/* The temporary name of a copy under -r: NAME with a prefix. */
static const char *tmpname(char *buf, const char *name)
{
	snprintf(buf, 512, ".vcf.%s", name);
	return buf;
}

struct copy {
	char *data;                   /* the source's bytes */
	size_t len;
};

static void *worker(void *arg)
{
	struct copy *c = calloc(batch, sizeof(*c));
	char *back, tmp[512];
	unsigned long long bytes = 0;

	(void)arg;
	if (!c || posix_memalign((void **)&back, 4096, MAX_FILE))
		die("malloc");
	for (;;) {
		size_t first, n, i;

		pthread_mutex_lock(&lock);
		first = next_file;
		n = first < nfiles ? (nfiles - first < batch ? nfiles - first : batch) : 0;
		next_file += n;
		pthread_mutex_unlock(&lock);
		if (!n)
			break;
		for (i = 0; i < n; i++) {
			struct file *f = &files[first + i];
			struct dir *d = &dirs[f->dir];
			struct stat st;
			struct timespec times[2];
			ssize_t r;
			int in, out;

			in = openat(d->src, f->name, O_RDONLY | O_NOFOLLOW);
			if (in < 0 || fstat(in, &st))
				die("open %s (source)", f->name);
			if (st.st_size > MAX_FILE) {
				errno = EFBIG;
				die("%s is over 1 MiB: this floor is for small files", f->name);
			}
			if (!(c[i].data = malloc(st.st_size ? st.st_size : 1)))
				die("malloc");
			r = read(in, c[i].data, st.st_size);
			if (r != st.st_size) {
				if (r >= 0)
					errno = EIO;
				die("read %s (source)", f->name);
			}
			close(in);
			c[i].len = (size_t)r;
			out = openat(d->dst, renames ? tmpname(tmp, f->name) : f->name,
				     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, st.st_mode & 07777);
			if (out < 0)
				die("create %s", f->name);
			if (write(out, c[i].data, c[i].len) != (ssize_t)c[i].len)
				die("write %s", f->name);
			times[0] = st.st_atim;
			times[1] = st.st_mtim;
			if (futimens(out, times))
				die("futimens %s", f->name);
			if (close(out))
				die("close %s", f->name);
		}
		/* One sync for the batch, as SyncMode=batch does. */
		if (syncfs(dirs[0].dst))
			die("syncfs");
		if (renames) {
			for (i = 0; i < n; i++) {
				struct file *f = &files[first + i];
				int dfd = dirs[f->dir].dst;

				if (renameat(dfd, tmpname(tmp, f->name), dfd, f->name))
					die("rename to %s", f->name);
			}
			if (syncfs(dirs[0].dst))
				die("syncfs");
		}
		for (i = 0; i < n; i++) {
			struct file *f = &files[first + i];
			size_t want = (c[i].len + 4095) & ~(size_t)4095;
			ssize_t r;
			int fd = openat(dirs[f->dir].dst, f->name, O_RDONLY | O_DIRECT | O_NOFOLLOW);

			if (fd < 0)
				die("open %s (read-back)", f->name);
			r = want ? pread(fd, back, want, 0) : 0;
			if (r != (ssize_t)c[i].len || memcmp(back, c[i].data, c[i].len)) {
				if (r >= 0)
					errno = EIO;
				die("read-back of %s differs", f->name);
			}
			close(fd);
			bytes += c[i].len;
			free(c[i].data);
		}
	}
	pthread_mutex_lock(&lock);
	total_bytes += bytes;
	pthread_mutex_unlock(&lock);
	free(back);
	free(c);
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = sysconf(_SC_NPROCESSORS_ONLN);
	struct timespec t0, t1;
	struct stat st;
	pthread_t *tid;
	long i;
	int opt;

	while ((opt = getopt(argc, argv, "rt:b:")) != -1) {
		if (opt == 'r')
			renames = 1;
		else if (opt == 't')
			threads = atol(optarg);
		else if (opt == 'b')
			batch = (size_t)atol(optarg);
		else
			goto usage;
	}
	if (argc - optind != 2 || threads < 1 || batch < 1) {
usage:
		fprintf(stderr, "usage: vcopy-floor [-r] [-t THREADS] [-b BATCH] SRC DEST\n");
		return 2;
	}
	umask(0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dirs = grow(dirs, &capdirs, 0, sizeof(*dirs));
	ndirs = 1;
	if (stat(argv[optind], &st))
		die("stat %s", argv[optind]);
	if (mkdir(argv[optind + 1], st.st_mode & 07777))
		die("mkdir %s", argv[optind + 1]);
	dirs[0].src = open(argv[optind], O_RDONLY | O_DIRECTORY);
	dirs[0].dst = open(argv[optind + 1], O_RDONLY | O_DIRECTORY);
	if (dirs[0].src < 0 || dirs[0].dst < 0)
		die("open %s or %s", argv[optind], argv[optind + 1]);
	dirs[0].times[0] = st.st_atim;
	dirs[0].times[1] = st.st_mtim;
	walk(0, argv[optind]);
	if (!(tid = calloc((size_t)threads, sizeof(*tid))))
		die("calloc");
	for (i = 0; i < threads; i++)
		if ((errno = pthread_create(&tid[i], NULL, worker, NULL)))
			die("pthread_create");
	for (i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	/* Directories last, deepest first (they were appended parent first). */
	for (i = (long)ndirs - 1; i >= 0; i--) {
		if (futimens(dirs[i].dst, dirs[i].times) || fsync(dirs[i].dst))
			die("directory %ld of the copy", i);
		close(dirs[i].src);
		close(dirs[i].dst);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("files %zu bytes %llu seconds %.3f\n", nfiles, total_bytes,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
