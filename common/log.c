/* log.c - see log.h. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "log.h"
#include "urlredact.h"

static char _ident[64] = "stagehand";
static int _to_syslog;
static enum log_level _threshold = LOG_LVL_INFO;

void log_open(const char *ident, int to_syslog, enum log_level threshold)
{
	if (ident && snprintf(_ident, sizeof(_ident), "%s", ident) >= (int)sizeof(_ident))
		_ident[sizeof(_ident) - 1] = '\0';
	_to_syslog = to_syslog;
	_threshold = threshold;
	if (_to_syslog)
		openlog(_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_set_level(enum log_level threshold)
{
	_threshold = threshold;
}

void log_close(void)
{
	if (_to_syslog)
		closelog();
	_to_syslog = 0;
}

static const char *_level_name(enum log_level lvl)
{
	switch (lvl) {
	case LOG_LVL_ERROR: return "error";
	case LOG_LVL_WARN:  return "warning";
	case LOG_LVL_INFO:  return "info";
	default:            return "debug";
	}
}

static int _syslog_prio(enum log_level lvl)
{
	switch (lvl) {
	case LOG_LVL_ERROR: return LOG_ERR;
	case LOG_LVL_WARN:  return LOG_WARNING;
	case LOG_LVL_INFO:  return LOG_INFO;
	default:            return LOG_DEBUG;
	}
}

int log_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
	if (err && errlen && vsnprintf(err, errlen, fmt, ap) >= (int)errlen && errlen > 4)
		memcpy(err + errlen - 4, "...", 4);
	return -1;
}

int log_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_verrf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

void log_vmsg(enum log_level lvl, const char *fmt, va_list ap)
{
	char raw[2048], buf[2048];

	if (lvl > _threshold)
		return;
	/* Truncation of a log line is acceptable; mark it so it is seen. */
	if (vsnprintf(raw, sizeof(raw), fmt, ap) >= (int)sizeof(raw))
		memcpy(raw + sizeof(raw) - 4, "...", 4);
	/* A URL's query may hold a secret (a pre-signed URL): never in a log. */
	url_redact(raw, buf, sizeof(buf));
	if (_to_syslog) {
		syslog(_syslog_prio(lvl), "%s", buf);
	} else {
		char ts[32];
		time_t now = time(NULL);
		struct tm tm;

		localtime_r(&now, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(stderr, "%s %s[%s]: %s\n", ts, _ident, _level_name(lvl), buf);
	}
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(lvl, fmt, ap);
	va_end(ap);
}
