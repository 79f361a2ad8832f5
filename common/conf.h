/*
 * conf.h - stagehand.conf: the site configuration shared by stagehandd and
 * the stagehand CLI.
 *
 * Owns: the one configuration struct, its defaults, parsing of the
 * Slurm-style "Key=Value" file (case-insensitive keys, '#' comments) and
 * validation. The keys, their kinds, limits and defaults are listed once, in
 * lua/stagehand_conf.lua (conf_int.h): a new key is a row there and a field
 * here. Life cycle: conf_create -> conf_parse_file -> conf_validate ->
 * conf_destroy. Every error names FILE:LINE.
 *
 * Must never: exit, log, or touch anything but the file it is given.
 */
#ifndef STAGEHAND_CONF_H
#define STAGEHAND_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"

enum conf_archive_mode {
	CONF_ARCHIVE_COPY = 0,	/* the daemon copies, verifies, labels archived */
	CONF_ARCHIVE_LABEL,	/* the site's HSM engine moves data; we flip labels */
};

enum conf_io_class {
	CONF_IO_IDLE = 0,	/* ioprio class idle: yield to every other I/O */
	CONF_IO_BEST_EFFORT,	/* kernel default class */
};

enum conf_yield_mode {
	CONF_YIELD_PAUSE = 0,	/* after-job transfers wait while jobs run on their file
				   system (at YieldBandwidth when that is set) */
	CONF_YIELD_CAP,		/* they go on at YieldBandwidth while jobs run */
	CONF_YIELD_ADAPTIVE,	/* they scavenge the bandwidth jobs leave idle (pace.h) */
};

enum conf_xattr_ns {
	CONF_XATTR_USER = 0,	/* user.stagehand.*: owners can set them */
	CONF_XATTR_TRUSTED,	/* trusted.stagehand.*: only root can set them */
};

struct conf {
	char *path;                    /* file the values came from; NULL = defaults only */
	char *socket_path;             /* UNIX socket of the API */
	char *listen_host;             /* TCP listen host, NULL = TCP off */
	unsigned short listen_port;    /* TCP listen port (when listen_host) */
	char *server;                  /* clients: "HOST:PORT" of the daemon over TCP +
					  MUNGE, NULL = use socket_path (dclient.h) */
	char *state_db;                /* SQLite database (queue, audit) */
	char **scratch_roots;          /* NULL-terminated; empty = stage_in dest anywhere */
	char *archive_root;            /* default archive destination root; NULL = none */
	enum conf_archive_mode archive_mode; /* copy or label */
	int workers;                   /* concurrent transfer worker processes */
	uint64_t bandwidth_cap;        /* bytes per second over all workers, 0 = unlimited */
	int max_retries;               /* retries after the first attempt */
	int retry_backoff;             /* seconds before the first retry; doubles each time */
	enum conf_xattr_ns xattr_ns;   /* namespace of the stagehand.* labels */
	char **allowed_schemes;        /* NULL-terminated, lower case URL schemes */
	char **stage_in_roots;         /* NULL-terminated; empty = stage_in source anywhere */
	int history_retention;         /* HistoryRetention: seconds a finished request
					  (not a done archive) is kept; -1 = never removed */
	int audit_retention;           /* AuditRetention: seconds an audit row is kept;
					  -1 = never removed */
	int input_retention;           /* InputRetention: seconds after a job's end before
					  stagehandd removes the inputs it staged into the
					  job's scratch input directory; 0 = at once,
					  -1 = never (left to the site's purge) */
	char **admin_users;            /* NULL-terminated user names with admin rights */
	char **admin_groups;           /* NULL-terminated group names with admin rights */
	enum log_level log_level;      /* error, warning, info, debug */
	char *pid_file;                /* written after the socket is bound; NULL = none */
	size_t max_request_bytes;      /* API body size cap */
	int max_connections_per_user;  /* simultaneous API connections per uid */
	int max_user_requests;         /* MaxUserRequests: live requests per uid; 0 = no limit */
	int max_user_items;            /* MaxUserItems: files not yet copied of a uid's live
					  requests; 0 = no limit */
	uint64_t max_user_queued_bytes; /* MaxUserQueuedBytes: bytes not yet copied of a uid's
					   live requests; 0 = no limit */
	enum conf_io_class io_class;   /* I/O priority class of the workers */
	int connection_timeout;        /* seconds an idle API connection is kept */
	int drain_timeout;             /* seconds SIGTERM waits for in-flight transfers */
	char *checksum;                /* checksum algorithm name: xxh128 or sha256 */
	int slurm_watch;               /* 1: find held jobs through libslurm (needs slurm.conf);
					  0: API only (a mover host without Slurm, tests) */
	/* Small-file bundling of archive copies (see xfer_bundle.c). */
	int archive_bundle;            /* 1: archive requests go to the "bundle" backend */
	int bundle_min_files;          /* bundle a tree only with at least this many small files */
	uint64_t bundle_file_max;      /* files smaller than this (bytes) go into bundles */
	uint64_t bundle_size;          /* a bundle is closed before it would grow past this */
	/* URL backends (daemon/engine/xfer_url.c) */
	char *s3_endpoint;             /* base URL of the S3 service; NULL = AWS for s3_region */
	char *s3_region;               /* SigV4 region, default us-east-1 */
	char *s3_credentials_file;     /* site S3 keys (read by root); NULL = per-user only */
	uint64_t s3_part_size;         /* S3 uploads: a file larger than this goes up in parts
					  of this size (multipart upload, resumable); 5M to 5G */
	char *url_ca_file;             /* CA bundle for https/ftps/S3 servers; NULL = system's */
	char *s3_site_prefix;          /* S3SitePrefix: "s3://BUCKET/.../%u/..." under which
					  the site's S3 keys may be used (%u: the owner's
					  name); NULL = the site's keys are used nowhere */
	char **outbound_allow;         /* OutboundAllow: NULL-terminated networks (CIDR text,
					  common/outbound.h) transfers may reach though the
					  deny list names them; NULL/empty = none */
	int archive_workers;           /* at most this many of the workers run after-job
					  transfers (archive, stage_out) at once */
	int yield_to_jobs;             /* 1: after-job transfers yield to running jobs on
					  their file systems */
	int yield_mode;                /* enum conf_yield_mode (YieldMode) */
	uint64_t yield_bandwidth;      /* bytes/s of a yielding transfer; 0 = pause */
	int yield_max_delay;           /* seconds a transfer yields before it goes on at
					  yield_trickle; 0 = yield for as long as jobs run */
	uint64_t yield_trickle;        /* bytes/s after yield_max_delay (0 = unlimited) */
	int yield_stage_in_lead;       /* YieldStageInLead: seconds; under adaptive, a
					  stage_in whose job slurmctld expects to start
					  later than this from now is paced like an
					  archive; 0 = stage-in is never paced */
	int sync_batch;                /* SyncMode: 1 batch (one syncfs per batch of small
					  files), 0 file (one fsync per file) */
	int verify_sample;             /* VerifyMode: 0 full (read every byte back), 1 sample
					  (large files: 1 chunk in 16 read back) */
	char *yield_probe;             /* test/site hook: a file listing busy directories,
					  one per line, as if jobs ran there; NULL = none */
	int create_user_dirs;          /* 1: the daemon makes ArchiveRoot/USER and
					  ScratchRoots/USER (owner USER, mode 0700) when a
					  request needs them and they are missing */
	int slurm_watch_interval;      /* SlurmWatchInterval: seconds between looks at
					  slurmctld's job table (1 to 3600) */
	int slurm_watch_full_interval; /* SlurmWatchFullInterval: SubmitMode=bb only:
					  seconds between reads of the whole job
					  table; in between, the jobs being staged
					  are asked for one by one */
	char *slurm_conf;              /* SlurmConf: the slurm.conf libslurm reads (set as
					  SLURM_CONF before slurm_init); NULL = environment */
	/* Observability and notifications (daemon/api/metrics_http.c, daemon/core/notify.c) */
	char *metrics_host;            /* MetricsAddress host: plain-HTTP /metrics for
					  Prometheus, no auth; NULL = off */
	unsigned short metrics_port;   /* MetricsAddress port (when metrics_host) */
	int metrics_hash_users;        /* 1: per-user series carry a hash of the user
					  name, not the name */
	char **notify_argv;            /* NotifyCommand: program and fixed arguments,
					  run without a shell; NULL = off */
	int notify_timeout;            /* seconds before a NotifyCommand is killed */
	/* Submit-time policy, read by lua/stagehand.lua from this same file; the
	   daemon checks recorded plans by the same limits. */
	int max_directives;            /* MaxDirectives: #DATA lines per script */
	int max_directive_line;        /* MaxDirectiveLine: bytes in one #DATA line */
	int max_path_length;           /* MaxPathLength: bytes in one path or URL */
	int max_plan_bytes;            /* MaxPlanBytes: largest admin_comment record (Lua only) */
	int submit_mode;               /* SubmitMode: CONF_SUBMIT_HOLD or CONF_SUBMIT_BB */
	uint64_t pool_capacity;        /* PoolCapacity: bytes each scratch root offers as a
					  burst-buffer pool (bb mode, Lua only); 0 = no pools */
	char **trusted_uids;           /* TrustedUids: uids whose releases job_modify never
					  refuses (Lua only); NULL-terminated numbers */
	/* Mover jobs (daemon/movers/mover_exec.c): big requests split into shards that
	   run as Slurm jobs of the owner on a transfer partition. */
	char *mover_partition;         /* MoverPartition: Slurm partition of mover jobs;
					  NULL = every request runs in local workers */
	char *mover_command;           /* MoverCommand: stagehand-mover as the nodes see it;
					  NULL = the installed one */
	uint64_t mover_shard_bytes;    /* MoverShardBytes: a shard holds about this many bytes */
	int mover_shard_files;         /* MoverShardFiles: ... and at most about this many files */
	int mover_max_jobs;            /* MoverMaxJobs: shards (mover jobs) per request at most */
	uint64_t mover_bandwidth;      /* MoverBandwidth: bytes/s of each mover job, 0 = unlimited */
	int key_line[128];             /* line each key was set on, 0 = default (conf.c only) */
};

/* SubmitMode values: how jobs with stage_in wait for their inputs. */
#define CONF_SUBMIT_HOLD 0  /* job_submit.lua holds them; stagehandd releases them */
#define CONF_SUBMIT_BB   1  /* Slurm's burst_buffer/lua stages them (docs/admin-guide.md) */

/* Defaults where the build put the config file. */
#ifndef STAGEHAND_SYSCONFDIR
#define STAGEHAND_SYSCONFDIR "/etc"
#endif
#define CONF_DEFAULT_FILE STAGEHAND_SYSCONFDIR "/stagehand/stagehand.conf"

/* A new struct holding the documented defaults; NULL when out of memory. */
struct conf *conf_create(void);

/*
 * Read path into c. Returns 0, or -1 with "FILE:LINE: error: ..." (or
 * "FILE: error: ..." when the file cannot be read) in err.
 */
int conf_parse_file(struct conf *c, const char *path, char *err, size_t errlen);

/* Parse one "Key=Value" line (no comment stripping needed); for tests. */
int conf_parse_line(struct conf *c, const char *line, const char *file, int lineno,
		    char *err, size_t errlen);

/* Cross-field checks. Returns 0, or -1 with a message in err. */
int conf_validate(const struct conf *c, char *err, size_t errlen);

void conf_destroy(struct conf *c);

/* Parse "200M", "1G/s", "0": bytes per second. Returns 0 or -1. */
int conf_parse_bytes(const char *s, uint64_t *out);
/* Parse "90", "90s", "15m", "2h", "1d": seconds. Returns 0 or -1. */
int conf_parse_seconds(const char *s, long *out);

/* The line of c->path that set key name (a stagehand.conf key name), 0 when
   it kept its default or the name is not a key. */
int conf_key_line(const struct conf *c, const char *name);

/* Static names for messages and health output. */
const char *conf_xattr_prefix(const struct conf *c); /* "user." or "trusted." */
const char *conf_log_level_name(enum log_level l);

#endif /* STAGEHAND_CONF_H */
