--[[
stagehand_conf.lua - every stagehand.conf key, once: the table the C parser
(common/conf_keys.c, through common/conf_keys_tab.h generated from this file
at build time), slurmctld's Lua module (stagehand.lua reads it at load time
from its own directory) and the documentation check (tests/unit/conf-keys.sh:
stagehand.conf(5) and etc/stagehand.conf show exactly these keys with these
defaults) all read.

Pure data: no code runs here, so it loads under Lua 5.1 through 5.4 and the
generator needs nothing but the interpreter configure already requires.

One entry per key, in the order of the C table (conf.key_line follows it):
  [1] name     the key as written in stagehand.conf (matched case-insensitively)
  [2] kind     how a value is read (the same kinds in conf_keys.c and stagehand.lua):
      int       decimal integer, min..max
      bool      yes | no (an int field: 1 | 0)
      enum      one of choices (an int field: the word's C constant)
      word      one of choices, kept as a lower-case string
      duration  seconds, or with s/m/h/d: min..max; off = the word for offval
      size      bytes with K/M/G/T (powers of 1024), optional B: min..max
                ("/s" is taken too, as it always was, but by keys Lua reads)
      path      an absolute path without '..'; off = the word meaning unset
      sockpath  a path that also fits a UNIX socket address (max bytes)
      roots     comma list of absolute directories, trailing '/' dropped
      names     comma list of user or group names
      schemes   comma list of URL schemes, lower-cased
      uids      comma list of numeric uids
      hostport  HOST:PORT ([v6]:PORT) or off/none: field = host, port = port
      server    HOST:PORT for clients
      url       an http:// or https:// base URL
      s3prefix  s3://BUCKET/PREFIX/ holding %u (the user's name), or off
      nets      comma list of IPv4/IPv6 networks (ADDR or ADDR/BITS)
      region    an S3 region name
      argv      an absolute program and fixed arguments, split on blanks
      partition a Slurm partition name, or off
  field    the struct conf member (common/conf.h)
  min, max limits, in the value's unit (bytes, seconds, count, path bytes)
  default  the value as written in stagehand.conf; nil = unset (the field
           stays zero / NULL), "" = an empty list
  off      a word that unsets the value (NULL), or for a duration means offval
  must     what the error says a value must be, when the kind's own wording
           is not enough ("KEY must be MUST, not 'VALUE'")
  lua      the name under which slurmctld's module keeps it (stagehand.lua's
           SITE table); keys without it are stagehandd's only
  choices  enum/word: { word, C constant [, alias = true] } in message order
  doc      one line for people
]]
local K, M, G, T = 1024, 1024 ^ 2, 1024 ^ 3, 1024 ^ 4
local DAY = 86400

return {
	-- Where the daemon listens and keeps its state
	{ "SocketPath", "sockpath", field = "socket_path", max = 107,
		default = "/run/stagehand/stagehandd.sock", lua = "socket_path",
		doc = "UNIX socket of the API; clients read it from here too" },
	{ "ListenAddress", "hostport", field = "listen_host", port = "listen_port",
		default = "off", must = "host:port (e.g. 0.0.0.0:7780) or off",
		doc = "TCP listener (MUNGE credentials) for other nodes, or off" },
	{ "Server", "server", field = "server",
		doc = "clients on hosts without the daemon: its TCP address, HOST:PORT" },
	{ "StateDB", "path", field = "state_db", default = "/var/lib/stagehand/stagehand.db",
		doc = "SQLite database of the queue, per-file progress and the audit trail" },
	{ "HistoryRetention", "duration", field = "history_retention", min = 1, max = 3650 * DAY,
		default = "never", off = "never", offval = -1,
		must = "a duration from 1s up to 3650d (e.g. 90d) or never",
		doc = "how long finished requests keep their per-file rows; never = always (done archives: always)" },
	{ "AuditRetention", "duration", field = "audit_retention", min = 1, max = 3650 * DAY,
		default = "never", off = "never", offval = -1,
		must = "a duration from 1s up to 3650d (e.g. 400d) or never",
		doc = "how long audit rows (one per verified file) are kept; never = all" },
	-- Where data may go
	{ "ScratchRoots", "roots", field = "scratch_roots", default = "", lua = "scratch_roots",
		doc = "roots stage_in destinations must be under; empty: anywhere" },
	{ "ArchiveRoot", "path", field = "archive_root",
		doc = "default archive destination root, which archives must be under" },
	{ "ArchiveMode", "enum", field = "archive_mode", default = "copy",
		choices = { { "copy", "CONF_ARCHIVE_COPY" }, { "label", "CONF_ARCHIVE_LABEL" } },
		doc = "copy: the daemon copies archives; label: the site's HSM moves them" },
	{ "Workers", "int", field = "workers", min = 1, max = 256, default = "2",
		doc = "concurrent transfer worker processes" },
	{ "BandwidthCap", "size", field = "bandwidth_cap", default = "0",
		must = "bytes per second with an optional K/M/G/T suffix (e.g. 200M), or 0 for unlimited",
		doc = "bytes per second over all workers; 0 = unlimited" },
	{ "MaxRetries", "int", field = "max_retries", min = 0, max = 100, default = "3",
		doc = "retries after the first failed attempt" },
	{ "RetryBackoff", "int", field = "retry_backoff", min = 1, max = DAY, default = "30",
		doc = "seconds before the first retry; doubles on each retry" },
	{ "XattrNamespace", "enum", field = "xattr_ns", default = "user",
		choices = { { "user", "CONF_XATTR_USER" }, { "trusted", "CONF_XATTR_TRUSTED" } },
		doc = "namespace of the stagehand.* labels: user or trusted" },
	{ "AllowedSchemes", "schemes", field = "allowed_schemes",
		default = "https,s3,ftp,ftps,sftp,file", lua = "allowed_schemes",
		doc = "URL schemes #DATA lines may name" },
	{ "StageInRoots", "roots", field = "stage_in_roots", default = "", lua = "stage_in_roots",
		doc = "roots stage_in sources must be under; empty: anywhere" },
	{ "InputRetention", "duration", field = "input_retention", min = 0, max = 365 * DAY,
		default = "24h", off = "never", offval = -1,
		must = "a duration up to 365d (e.g. 24h, 90m, 0 to remove at once) or never",
		doc = "how long staged inputs stay after the job ends; never = the site's purge" },
	{ "AdminUsers", "names", field = "admin_users", default = "",
		doc = "users with admin rights in the API" },
	{ "AdminGroups", "names", field = "admin_groups", default = "",
		doc = "groups whose members have admin rights in the API" },
	{ "LogLevel", "enum", field = "log_level", default = "info",
		must = "error, warning, info or debug",
		choices = { { "error", "LOG_LVL_ERROR" }, { "warning", "LOG_LVL_WARN" },
			{ "warn", "LOG_LVL_WARN", alias = true }, { "info", "LOG_LVL_INFO" },
			{ "debug", "LOG_LVL_DEBUG" } },
		doc = "error, warning, info or debug" },
	{ "PidFile", "path", field = "pid_file", default = "/run/stagehand/stagehandd.pid", off = "none",
		doc = "written once the socket is bound; none = no pidfile" },
	{ "MaxRequestBytes", "size", field = "max_request_bytes", min = K, max = 64 * M, default = "64K",
		must = "from 1K to 64M",
		doc = "largest API request body; larger ones get HTTP 413" },
	{ "MaxConnectionsPerUser", "int", field = "max_connections_per_user", min = 1, max = 10000,
		default = "16", doc = "simultaneous API connections per uid; more get HTTP 429" },
	{ "MaxUserRequests", "int", field = "max_user_requests", min = 0, max = 100000000,
		default = "50000",
		doc = "live requests per user (admins exempt); more get HTTP 429; 0 = no limit" },
	{ "MaxUserItems", "int", field = "max_user_items", min = 0, max = 2000000000,
		default = "10000000",
		doc = "files not yet copied of a user's live requests (admins exempt); 0 = no limit" },
	{ "MaxUserQueuedBytes", "size", field = "max_user_queued_bytes", min = 0, default = "100T",
		doc = "bytes not yet copied of a user's live requests (admins exempt); 0 = no limit" },
	{ "IOClass", "enum", field = "io_class", default = "idle",
		choices = { { "idle", "CONF_IO_IDLE" }, { "best-effort", "CONF_IO_BEST_EFFORT" } },
		doc = "I/O priority class of the workers" },
	{ "ConnectionTimeout", "int", field = "connection_timeout", min = 1, max = 3600, default = "30",
		doc = "seconds a request may take to arrive on its connection" },
	{ "DrainTimeout", "int", field = "drain_timeout", min = 0, max = DAY, default = "60",
		doc = "seconds SIGTERM waits for running transfers" },
	{ "Checksum", "word", field = "checksum", default = "xxh128",
		choices = { { "xxh128" }, { "sha256" } },
		doc = "checksum verifying every copy: xxh128 or sha256" },
	{ "SlurmWatch", "bool", field = "slurm_watch", default = "yes",
		doc = "find held jobs through libslurm; no = API only" },
	{ "SlurmConf", "path", field = "slurm_conf", default = "environment", off = "environment",
		doc = "the slurm.conf libslurm reads; environment = SLURM_CONF as found" },
	{ "SlurmWatchInterval", "duration", field = "slurm_watch_interval", min = 1, max = 3600,
		default = "2", must = "1s to 1h (e.g. 2, 10s, 1m)",
		doc = "seconds between looks at slurmctld's job table" },
	{ "SlurmWatchFullInterval", "duration", field = "slurm_watch_full_interval", min = 1, max = DAY,
		default = "60", must = "1s to 1d (e.g. 60, 5m)",
		doc = "bb mode: seconds between reads of the whole job table" },
	{ "CreateUserDirs", "bool", field = "create_user_dirs", default = "yes",
		doc = "the daemon makes ROOT/USER (owner USER, mode 0700) when missing" },
	-- Bundling
	{ "ArchiveBundle", "bool", field = "archive_bundle", default = "no",
		doc = "archive trees of many small files as tar bundles plus an index" },
	{ "BundleMinFiles", "int", field = "bundle_min_files", min = 1, max = 1000000000, default = "1000",
		doc = "bundle a tree only with at least this many small files" },
	{ "BundleFileMax", "size", field = "bundle_file_max", min = K, max = 64 * M, default = "1M",
		must = "a size from 1K to 64M (e.g. 1M)",
		doc = "files smaller than this go into bundles" },
	{ "BundleSize", "size", field = "bundle_size", min = M, max = T, default = "1G",
		must = "a size from 1M to 1T (e.g. 1G)",
		doc = "a bundle is closed before it would grow past this" },
	-- URL backends
	{ "S3Endpoint", "url", field = "s3_endpoint",
		doc = "base URL of the S3 service; unset: AWS in S3Region" },
	{ "S3Region", "region", field = "s3_region", default = "us-east-1",
		doc = "region in the SigV4 signature" },
	{ "S3CredentialsFile", "path", field = "s3_credentials_file", default = "none", off = "none",
		doc = "site-wide S3 keys (root's, mode 0600); none = per-user keys only" },
	{ "S3PartSize", "size", field = "s3_part_size", min = 5 * M, max = 5 * G, default = "64M",
		must = "a size from 5M to 5G (S3's bounds for a part)",
		doc = "S3 uploads larger than this go up in parts of this size" },
	{ "URLCAFile", "path", field = "url_ca_file", default = "system", off = "system",
		doc = "CA bundle for https/ftps/S3 servers; system = the system's store" },
	{ "S3SitePrefix", "s3prefix", field = "s3_site_prefix", default = "none", off = "none",
		doc = "where S3CredentialsFile's keys may be used, per user (%u: the owner's name); none = nowhere" },
	{ "OutboundAllow", "nets", field = "outbound_allow", default = "",
		doc = "networks transfers may reach though the outbound deny list names them (CIDRs)" },
	{ "ArchiveWorkers", "int", field = "archive_workers", min = 1, max = 256, default = "1",
		doc = "workers that may run after-job transfers at once" },
	-- Yielding to running jobs
	{ "YieldToJobs", "bool", field = "yield_to_jobs", default = "yes",
		doc = "after-job transfers yield to jobs running on their file systems" },
	{ "YieldMode", "enum", field = "yield_mode", default = "adaptive",
		choices = { { "pause", "CONF_YIELD_PAUSE" }, { "cap", "CONF_YIELD_CAP" },
			{ "adaptive", "CONF_YIELD_ADAPTIVE" } },
		doc = "how they yield: pause, cap or adaptive" },
	{ "YieldBandwidth", "size", field = "yield_bandwidth", default = "0",
		must = "bytes per second with an optional K/M/G/T suffix (e.g. 20M), or 0 to pause",
		doc = "bytes per second of a yielding transfer; 0 = pause" },
	{ "YieldMaxDelay", "duration", field = "yield_max_delay", min = 0, max = 30 * DAY, default = "2h",
		must = "a duration up to 30d (e.g. 90s, 15m, 2h), or 0 to yield for as long as jobs run",
		doc = "after yielding this long a transfer goes on at YieldTrickle" },
	{ "YieldTrickle", "size", field = "yield_trickle", default = "10M",
		must = "bytes per second with an optional K/M/G/T suffix (e.g. 10M), or 0 for unlimited",
		doc = "bytes per second after YieldMaxDelay; 0 = unlimited" },
	{ "YieldStageInLead", "duration", field = "yield_stage_in_lead", min = 0, max = 7 * DAY,
		default = "10m", must = "a duration up to 7d (e.g. 10m, 1h), or 0 to never pace a stage-in",
		doc = "adaptive: a stage-in whose job starts later than this is paced" },
	{ "YieldProbe", "path", field = "yield_probe", default = "none", off = "none",
		doc = "tests: a file listing directories treated as running jobs'" },
	{ "SyncMode", "enum", field = "sync_batch", default = "batch",
		choices = { { "batch", "1" }, { "file", "0" } },
		doc = "batch: one syncfs per batch of small files; file: one fsync per file" },
	{ "VerifyMode", "enum", field = "verify_sample", default = "full",
		choices = { { "full", "0" }, { "sample", "1" } },
		doc = "large files: full read-back or 1 chunk in 16" },
	-- Observability, notifications
	{ "MetricsAddress", "hostport", field = "metrics_host", port = "metrics_port", default = "off",
		must = "host:port (e.g. 127.0.0.1:9750) or off",
		doc = "plain-HTTP /metrics for Prometheus, or off" },
	{ "MetricsHashUsers", "bool", field = "metrics_hash_users", default = "no",
		doc = "per-user series carry a hash of the user name" },
	{ "NotifyCommand", "argv", field = "notify_argv", default = "none", off = "none",
		doc = "program run when a transfer is done, failed for good or cancelled; none = off" },
	{ "NotifyTimeout", "duration", field = "notify_timeout", min = 1, max = 3600, default = "30s",
		must = "a duration from 1s to 1h",
		doc = "a NotifyCommand running longer is killed" },
	-- The #DATA grammar's limits (the submit check, 'stagehand check', the daemon)
	{ "MaxDirectives", "int", field = "max_directives", min = 1, max = 4096, default = "64",
		lua = "max_directives", doc = "#DATA directives per script" },
	{ "MaxDirectiveLine", "int", field = "max_directive_line", min = 64, max = 65536, default = "4096",
		lua = "max_line", doc = "bytes in one #DATA line" },
	{ "MaxPathLength", "int", field = "max_path_length", min = 16, max = 4095, default = "4095",
		lua = "max_path", doc = "bytes in one path or URL" },
	-- Submit-time policy (slurmctld's Lua module)
	{ "MaxPlanBytes", "int", field = "max_plan_bytes", min = 256, max = 16777216, default = "16384",
		lua = "max_plan_bytes", doc = "largest plan record written to a job's admin_comment" },
	{ "SubmitMode", "enum", field = "submit_mode", default = "hold", lua = "submit_mode",
		choices = { { "hold", "CONF_SUBMIT_HOLD" }, { "bb", "CONF_SUBMIT_BB" } },
		doc = "hold: job_submit holds stage_in jobs; bb: Slurm's burst_buffer/lua stages them" },
	{ "PoolCapacity", "size", field = "pool_capacity", min = 1, max = 8192 * T, lua = "pool_capacity",
		must = "a size in bytes with an optional K/M/G/T suffix (e.g. 500G), from 1 to 8P",
		doc = "bb mode: bytes each scratch root offers as a burst-buffer pool" },
	{ "TrustedUids", "uids", field = "trusted_uids", default = "0", lua = "trusted_uids",
		doc = "uids whose release of a held job is never refused" },
	-- Mover jobs
	{ "MoverPartition", "partition", field = "mover_partition", default = "none", off = "none",
		must = "a Slurm partition name (letters, digits, '_', '-', '.') or none",
		doc = "partition where big requests run as mover jobs; none = local workers" },
	{ "MoverCommand", "path", field = "mover_command",
		doc = "stagehand-mover as the partition's nodes see it; unset: the installed one" },
	{ "MoverShardBytes", "size", field = "mover_shard_bytes", min = 1, default = "64G",
		must = "a size in bytes above 0 with an optional K/M/G/T suffix",
		doc = "bytes a shard holds, about" },
	{ "MoverShardFiles", "int", field = "mover_shard_files", min = 1, max = 1000000000,
		default = "100000", doc = "files a shard holds, about" },
	{ "MoverMaxJobs", "int", field = "mover_max_jobs", min = 1, max = 1024, default = "16",
		doc = "shards (mover jobs) per request at most" },
	{ "MoverBandwidth", "size", field = "mover_bandwidth", default = "0",
		must = "bytes per second with an optional K/M/G/T suffix (0 = unlimited)",
		doc = "bytes per second of each mover job; 0 = unlimited" },
}
