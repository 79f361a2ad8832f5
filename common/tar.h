/*
 * tar.h - POSIX tar archives (ustar headers, pax extended headers) for the
 * archive bundles of small files: the daemon writes them, `stagehand restore`
 * and the tests read them back.
 *
 * Owns: encoding one member's headers (a pax 'x' header when the name or the
 * link target does not fit the ustar fields, the mtime has nanoseconds, or a
 * number is too large for its octal field, then the ustar header), checking
 * one ustar header block, and (tar_read.c) reading whole archives through
 * libarchive's tar reader, which trusts no byte of them. The writer stays
 * ours: it must put each member's data at an offset the index can record,
 * and it is tested against GNU tar both ways (tests/unit/test_tar.c).
 *
 * Writing is stateless: the caller writes tar_header_encode()'s blocks, the
 * data, tar_pad() zero bytes, and TAR_END_BYTES zero bytes after the last
 * member. The member's data starts right after its headers, so an index can
 * record that offset and a reader can seek straight to it.
 *
 * Must never: open paths, allocate in the writer, or crash on any input.
 */
#ifndef STAGEHAND_TAR_H
#define STAGEHAND_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TAR_BLOCK 512
#define TAR_END_BYTES (2 * TAR_BLOCK)   /* two zero blocks close an archive */
#define TAR_NAME_MAX 4096               /* longest member name or link target accepted */

enum tar_type {
	TAR_REG = '0',
	TAR_SYMLINK = '2',
	TAR_DIR = '5',
};

/* One member as the writer takes it. Borrowed strings. */
struct tar_member {
	const char *path;      /* relative name inside the archive; no leading '/' */
	const char *linkname;  /* symlink target (TAR_SYMLINK), else NULL */
	enum tar_type type;
	uint64_t size;         /* data bytes (0 for symlinks and directories) */
	uint32_t mode;         /* permission bits (07777) */
	uint32_t uid, gid;
	int64_t mtime_ns;      /* nanoseconds since the epoch (may be negative) */
};

/*
 * Bytes of header blocks tar_header_encode() writes for m (a multiple of
 * TAR_BLOCK: 512, or 1024 + the pax records rounded up). 0 if m cannot be
 * stored (empty or over-long name).
 */
size_t tar_header_size(const struct tar_member *m);

/*
 * Write m's headers into out (outlen >= tar_header_size(m)). Returns the
 * bytes written, or 0 with a message in err.
 */
size_t tar_header_encode(const struct tar_member *m, char *out, size_t outlen,
			 char *err, size_t errlen);

/* Zero bytes that follow size bytes of data to fill the last block. */
size_t tar_pad(uint64_t size);

/*
 * Check one ustar header block: its checksum, magic and octal fields. On
 * success fills type (the typeflag byte), size and, when name is not NULL,
 * the ustar name (prefix/name joined, NUL-terminated into namelen bytes).
 * Returns 0, or -1 with a message in err.
 */
int tar_header_check(const unsigned char blk[TAR_BLOCK], char *type, uint64_t *size,
		     char *name, size_t namelen, char *err, size_t errlen);

/* ---- reader (common/tar_read.c: libarchive's tar reader) ---- */

/* A member as read back. path and linkname are owned by the reader. */
struct tar_entry {
	char *path;
	char *linkname;        /* "" when none */
	char type;             /* typeflag as stored: '0' file, '1' hard link, '2' symlink,
				  '3' char device, '4' block device, '5' directory, '6' FIFO */
	uint64_t size;
	uint32_t mode, uid, gid;
	int64_t mtime_ns;
	uint64_t data_offset;  /* where the member's data starts in the archive */
};

struct archive;

struct tar_reader {
	struct archive *a;     /* owned */
	uint64_t limit;        /* archive size */
	struct tar_entry cur;  /* the last entry returned */
};

/*
 * Start reading fd (a regular file, from its current offset, which the
 * reader then owns) or len bytes at buf (borrowed until tar_reader_free).
 * Only tar (ustar, pax, GNU) is accepted, never a compressed stream or
 * another format. Returns 0, or -1 with a message (r then needs no free).
 */
int tar_reader_init(struct tar_reader *r, int fd, char *err, size_t errlen);
int tar_reader_init_mem(struct tar_reader *r, const void *buf, size_t len, char *err,
			size_t errlen);
/*
 * The next member into *e (valid until the next call or tar_reader_free).
 * Returns 1, 0 at the end of the archive, -1 with a message in err for a
 * damaged or hostile archive (any libarchive warning or error, names longer
 * than TAR_NAME_MAX or empty, data past the end of the archive).
 */
int tar_reader_next(struct tar_reader *r, struct tar_entry **e, char *err, size_t errlen);
void tar_reader_free(struct tar_reader *r);

#endif /* STAGEHAND_TAR_H */
