/* test_conf.c - stagehand.conf parsing: values, defaults, FILE:LINE errors. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "tests/tap.h"

static char _path[] = "/tmp/test_conf_XXXXXX";

/* Write text to the temp file and parse it; returns rc, err filled. */
static int _parse(const char *text, struct conf **out, char *err, size_t errlen)
{
	FILE *f = fopen(_path, "w");
	struct conf *c = conf_create();
	int rc;

	fputs(text, f);
	fclose(f);
	err[0] = '\0';
	rc = conf_parse_file(c, _path, err, errlen);
	if (rc == 0)
		rc = conf_validate(c, err, errlen);
	if (out)
		*out = c;
	else
		conf_destroy(c);
	return rc;
}

/* The error must start with "FILE:LINE: error:" and contain needle. */
static int _err_at(const char *text, int line, const char *needle)
{
	char err[1024], want[300];
	int rc = _parse(text, NULL, err, sizeof(err));

	snprintf(want, sizeof(want), "%s:%d: error:", _path, line);
	if (rc == 0 || strncmp(err, want, strlen(want)) != 0 || !strstr(err, needle)) {
		printf("# got: %s\n", err);
		return 0;
	}
	return 1;
}

int main(void)
{
	struct conf *c;
	char err[1024];
	uint64_t b;
	int fd = mkstemp(_path);

	if (fd < 0)
		return 77;
	close(fd);

	c = conf_create();
	ok(c && strcmp(c->socket_path, "/run/stagehand/stagehandd.sock") == 0, "default SocketPath");
	ok(c && c->workers == 2 && c->bandwidth_cap == 0 && c->io_class == CONF_IO_IDLE,
	   "default Workers, BandwidthCap, IOClass");
	ok(c && c->listen_host == NULL && c->scratch_roots[0] == NULL, "TCP off and no roots by default");
	ok(c && strcmp(c->allowed_schemes[0], "https") == 0, "default AllowedSchemes");
	conf_destroy(c);

	ok(_parse("# comment\n\n  socketpath = /tmp/x.sock  # trailing\nWORKERS=4\n"
		  "BandwidthCap=200M\nScratchRoots=/scratch/, /lscratch\nArchiveRoot=/archive\n"
		  "ArchiveMode=label\nXattrNamespace=trusted\nAllowedSchemes=HTTPS,s3\n"
		  "AdminUsers=alice,bob\nAdminGroups=hpcadm\nLogLevel=debug\nPidFile=none\n"
		  "MaxRequestBytes=1M\nMaxConnectionsPerUser=3\nIOClass=best-effort\n"
		  "ListenAddress=0.0.0.0:7780\nMaxRetries=5\nRetryBackoff=10\nChecksum=SHA256\n"
		  "StageInRoots=/archive,/project\nStateDB=/var/tmp/s.db\nDrainTimeout=0\n"
		  "ConnectionTimeout=5\n", &c, err, sizeof(err)) == 0, "a full file parses (%s)", err);
	ok(strcmp(c->socket_path, "/tmp/x.sock") == 0, "keys are case-insensitive, values trimmed");
	ok(c->workers == 4, "Workers=4");
	ok(c->bandwidth_cap == 200ULL << 20, "BandwidthCap=200M is 200 MiB/s");
	ok(c->scratch_roots[0] && strcmp(c->scratch_roots[0], "/scratch") == 0 &&
	   c->scratch_roots[1] && strcmp(c->scratch_roots[1], "/lscratch") == 0 && !c->scratch_roots[2],
	   "ScratchRoots list split, trimmed, trailing slash dropped");
	ok(c->archive_mode == CONF_ARCHIVE_LABEL && c->xattr_ns == CONF_XATTR_TRUSTED,
	   "ArchiveMode and XattrNamespace");
	ok(strcmp(conf_xattr_prefix(c), "trusted.") == 0, "xattr prefix trusted.");
	ok(strcmp(c->allowed_schemes[0], "https") == 0 && strcmp(c->allowed_schemes[1], "s3") == 0,
	   "AllowedSchemes lower-cased");
	ok(c->admin_users[1] && strcmp(c->admin_users[1], "bob") == 0, "AdminUsers");
	ok(c->log_level == LOG_LVL_DEBUG && c->pid_file == NULL, "LogLevel, PidFile=none");
	ok(c->max_request_bytes == 1 << 20 && c->max_connections_per_user == 3, "limits");
	ok(c->listen_host && strcmp(c->listen_host, "0.0.0.0") == 0 && c->listen_port == 7780,
	   "ListenAddress host:port");
	ok(strcmp(c->checksum, "sha256") == 0 && c->drain_timeout == 0, "Checksum, DrainTimeout");
	conf_destroy(c);

	ok(_err_at("Workers=2\nFoo=1\n", 2, "unknown key 'Foo'"), "unknown key names its line");
	ok(_err_at("\n\n# x\nWorkers=0\n", 4, "Workers must be an integer from 1 to 256"),
	   "Workers=0 refused at line 4");
	ok(_err_at("Workers=2x\n", 1, "not '2x'"), "Workers=2x refused");
	ok(_err_at("BandwidthCap=fast\n", 1, "BandwidthCap"), "bad BandwidthCap");
	ok(_err_at("ArchiveMode=tape\n", 1, "'copy' or 'label'"), "bad ArchiveMode");
	ok(_err_at("XattrNamespace=security\n", 1, "'user' or 'trusted'"), "bad XattrNamespace");
	ok(_err_at("IOClass=realtime\n", 1, "'idle' or 'best-effort'"), "bad IOClass");
	ok(_err_at("LogLevel=loud\n", 1, "LogLevel"), "bad LogLevel");
	ok(_err_at("SocketPath=relative.sock\n", 1, "absolute path"), "relative SocketPath");
	ok(_err_at("ScratchRoots=/a,/b/../c\n", 1, "'..'"), "'..' in a root");
	ok(_err_at("ListenAddress=localhost\n", 1, "host:port"), "ListenAddress without port");
	ok(_err_at("ListenAddress=h:70000\n", 1, "host:port"), "port out of range");
	ok(_err_at("AllowedSchemes=https,9p\n", 1, "not a URL scheme"), "bad scheme");
	ok(_err_at("just words\n", 1, "expected Key=Value"), "line without '='");
	ok(_err_at("Workers=2\nworkers=3\n", 2, "already set on line 1"), "duplicate key");
	ok(_err_at("MaxRequestBytes=10\n", 1, "1K to 64M"), "MaxRequestBytes too small");
	ok(_err_at("Checksum=md5\n", 1, "xxh128"), "unknown checksum");
	ok(_err_at("ScratchRoots=/scratch\nArchiveRoot=/scratch/arch\n", 2, "inside scratch root"),
	   "validation: ArchiveRoot inside a scratch root, at its line");
	{
		char big[5000];

		memset(big, 'x', sizeof(big) - 2);
		big[sizeof(big) - 2] = '\n';
		big[sizeof(big) - 1] = '\0';
		ok(_err_at(big, 1, "longer than"), "overlong line refused");
	}
	c = conf_create();
	ok(conf_parse_file(c, "/nonexistent/stagehand.conf", err, sizeof(err)) < 0 &&
	   strstr(err, "/nonexistent/stagehand.conf: error: cannot open"), "missing file: %s", err);
	conf_destroy(c);

	ok(conf_parse_bytes("0", &b) == 0 && b == 0, "bytes: 0");
	ok(conf_parse_bytes("1G/s", &b) == 0 && b == 1ULL << 30, "bytes: 1G/s");
	ok(conf_parse_bytes("512KB", &b) == 0 && b == 512 << 10, "bytes: 512KB");
	ok(conf_parse_bytes("-1", &b) < 0 && conf_parse_bytes("1Q", &b) < 0 &&
	   conf_parse_bytes("99999999999999999999T", &b) < 0, "bytes: bad input refused");
	{
		long sec;

		ok(conf_parse_seconds("90", &sec) == 0 && sec == 90, "seconds: 90");
		ok(conf_parse_seconds("15m", &sec) == 0 && sec == 900, "seconds: 15m");
		ok(conf_parse_seconds("2h", &sec) == 0 && sec == 7200, "seconds: 2h");
		ok(conf_parse_seconds("1d", &sec) == 0 && sec == 86400, "seconds: 1d");
		ok(conf_parse_seconds("h", &sec) < 0 && conf_parse_seconds("5x", &sec) < 0 &&
		   conf_parse_seconds("-5", &sec) < 0, "seconds: bad input refused");
	}
	c = conf_create();
	ok(c->archive_workers == 1 && c->yield_to_jobs == 1 && c->yield_bandwidth == 0 &&
	   c->yield_max_delay == 7200 && c->yield_trickle == 10ULL << 20 && !c->yield_probe,
	   "yield defaults: ArchiveWorkers=1 YieldToJobs=yes YieldBandwidth=0 "
	   "YieldMaxDelay=2h YieldTrickle=10M");
	conf_destroy(c);
	ok(_parse("ArchiveWorkers=3\nYieldToJobs=no\nYieldBandwidth=20M\nYieldMaxDelay=30m\n"
		  "YieldTrickle=1M\nYieldProbe=/run/busy\n", &c, err, sizeof(err)) == 0 &&
	   c->archive_workers == 3 && !c->yield_to_jobs && c->yield_bandwidth == 20ULL << 20 &&
	   c->yield_max_delay == 1800 && c->yield_trickle == 1ULL << 20 &&
	   strcmp(c->yield_probe, "/run/busy") == 0, "yield keys parsed: %s", err);
	conf_destroy(c);
	c = conf_create();
	ok(c->sync_batch == 1 && c->verify_sample == 0, "defaults: SyncMode=batch VerifyMode=full");
	conf_destroy(c);
	ok(_parse("SyncMode=file\nVerifyMode=sample\n", &c, err, sizeof(err)) == 0 &&
	   c->sync_batch == 0 && c->verify_sample == 1, "SyncMode=file VerifyMode=sample: %s", err);
	conf_destroy(c);
	ok(_err_at("SyncMode=never\n", 1, "'batch' or 'file'"), "bad SyncMode");
	ok(_err_at("VerifyMode=none\n", 1, "'full' or 'sample'"), "bad VerifyMode");
	ok(_err_at("ArchiveWorkers=0\n", 1, "ArchiveWorkers must be an integer"), "ArchiveWorkers=0");
	ok(_err_at("YieldToJobs=maybe\n", 1, "'yes' or 'no'"), "bad YieldToJobs");
	ok(_err_at("YieldBandwidth=slow\n", 1, "YieldBandwidth"), "bad YieldBandwidth");
	ok(_err_at("YieldMaxDelay=forever\n", 1, "YieldMaxDelay must be a duration"),
	   "bad YieldMaxDelay");
	ok(_err_at("YieldMaxDelay=31d\n", 1, "up to 30d"), "YieldMaxDelay too long");
	ok(_err_at("YieldProbe=busy.txt\n", 1, "absolute path"), "relative YieldProbe");
	/* Observability, notifications, grammar limits */
	ok(_parse("MetricsAddress=127.0.0.1:9750\nMetricsHashUsers=yes\n"
		  "NotifyCommand=/usr/local/bin/notify --to  ops\nNotifyTimeout=2m\n"
		  "MaxDirectives=8\nMaxDirectiveLine=512\nMaxPathLength=1024\n", &c, err,
		  sizeof(err)) == 0 && c->metrics_host && strcmp(c->metrics_host, "127.0.0.1") == 0 &&
	   c->metrics_port == 9750 && c->metrics_hash_users == 1 && c->notify_argv &&
	   strcmp(c->notify_argv[0], "/usr/local/bin/notify") == 0 &&
	   strcmp(c->notify_argv[1], "--to") == 0 && strcmp(c->notify_argv[2], "ops") == 0 &&
	   !c->notify_argv[3] && c->notify_timeout == 120 && c->max_directives == 8 &&
	   c->max_directive_line == 512 && c->max_path_length == 1024 && !c->listen_host,
	   "MetricsAddress, MetricsHashUsers, NotifyCommand (split on blanks), NotifyTimeout, limits");
	conf_destroy(c);
	c = conf_create();
	ok(c && !c->metrics_host && !c->notify_argv && c->notify_timeout == 30 &&
	   c->max_directives == 64 && c->max_directive_line == 4096 && c->max_path_length == 4095,
	   "defaults: no metrics server, no NotifyCommand, NotifyTimeout 30 s, the grammar's limits");
	conf_destroy(c);
	ok(_err_at("MetricsAddress=9750\n", 1, "MetricsAddress must be host:port"),
	   "MetricsAddress without a host");
	ok(_err_at("NotifyCommand=notify.sh\n", 1, "NotifyCommand's program must be an absolute path"),
	   "NotifyCommand relative");
	ok(_err_at("NotifyTimeout=0\n", 1, "NotifyTimeout must be a duration from 1s to 1h"),
	   "NotifyTimeout 0");
	ok(_err_at("ListenAddress=0.0.0.0:7780\nMetricsAddress=0.0.0.0:7780\n", 2,
		   "MetricsAddress and ListenAddress are the same address"), "metrics on the API port");
	ok(_err_at("MaxPathLength=5000\n", 1, "MaxPathLength must be an integer from 16 to 4095"),
	   "MaxPathLength over the grammar's own");
	c = conf_create();
	ok(c->yield_mode == CONF_YIELD_ADAPTIVE, "YieldMode defaults to adaptive");
	ok(c->yield_stage_in_lead == 600, "YieldStageInLead defaults to 10 minutes");
	conf_destroy(c);
	ok(_parse("YieldMode=pause\nYieldStageInLead=1h\n", &c, err, sizeof(err)) == 0 &&
	   c->yield_mode == CONF_YIELD_PAUSE && c->yield_stage_in_lead == 3600,
	   "YieldMode=pause, YieldStageInLead=1h: %s", err);
	conf_destroy(c);
	ok(_parse("YieldStageInLead=0\n", &c, err, sizeof(err)) == 0 &&
	   c->yield_stage_in_lead == 0, "YieldStageInLead=0: %s", err);
	conf_destroy(c);
	ok(_err_at("\n\nYieldStageInLead=8d\n", 3, "YieldStageInLead must be a duration up to 7d"),
	   "YieldStageInLead over 7 days");
	c = conf_create();
	ok(c->slurm_watch_full_interval == 60, "SlurmWatchFullInterval defaults to 60 s");
	conf_destroy(c);
	ok(_parse("SlurmWatchFullInterval=5m\n", &c, err, sizeof(err)) == 0 &&
	   c->slurm_watch_full_interval == 300, "SlurmWatchFullInterval=5m: %s", err);
	conf_destroy(c);
	ok(_err_at("SlurmWatchFullInterval=0\n", 1, "SlurmWatchFullInterval must be 1s to 1d"),
	   "SlurmWatchFullInterval=0");
	ok(_parse("YieldMode=adaptive\n", &c, err, sizeof(err)) == 0 &&
	   c->yield_mode == CONF_YIELD_ADAPTIVE, "YieldMode=adaptive: %s", err);
	conf_destroy(c);
	ok(_parse("YieldMode=CAP\nYieldBandwidth=50M\n", &c, err, sizeof(err)) == 0 &&
	   c->yield_mode == CONF_YIELD_CAP, "YieldMode=cap with YieldBandwidth: %s", err);
	conf_destroy(c);
	ok(_err_at("YieldMode=fast\n", 1, "'pause', 'cap' or 'adaptive'"), "bad YieldMode");
	ok(_err_at("\nYieldMode=cap\n", 2, "needs YieldBandwidth"), "YieldMode=cap alone");
	unlink(_path);
	return tap_done();
}
