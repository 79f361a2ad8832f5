/*
 * log.h - one logging interface for the daemon, the CLI and the plugin.
 *
 * Owns: formatting and routing of log lines (stderr or syslog) with a fixed
 * prefix and a level threshold, and the formatting of error messages into a
 * caller's buffer (log_errf). Must never: exit or abort (the SPANK plugin
 * shares it and must never take slurmstepd down).
 */
#ifndef STAGEHAND_LOG_H
#define STAGEHAND_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* ident: prefix such as "stagehandd"; to_syslog: 1 = syslog, 0 = stderr. */
void log_open(const char *ident, int to_syslog, enum log_level threshold);
void log_set_level(enum log_level threshold);
void log_close(void);

void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level lvl, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * The one error-message formatter: fmt into err (errlen bytes; nothing
 * when err is NULL or errlen is 0); a message cut short ends in "...", so
 * that it is seen to be cut. Returns -1, for "return log_errf(...)".
 */
int log_errf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int log_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#define log_err(...)   log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif /* STAGEHAND_LOG_H */
