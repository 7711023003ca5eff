/* log.h: diagnostics on stderr, one line each, with a level. stdout is kept for
 * program output (generated text, inspect tables). Thread-safe (one fprintf). */
#ifndef SP_LOG_H
#define SP_LOG_H

typedef enum sp_log_level { SP_LOG_DEBUG, SP_LOG_INFO, SP_LOG_WARN, SP_LOG_ERROR } sp_log_level;

void sp_log_set_level(sp_log_level level);
void sp_log(sp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sp_log_debug(...) sp_log(SP_LOG_DEBUG, __VA_ARGS__)
#define sp_log_info(...)  sp_log(SP_LOG_INFO, __VA_ARGS__)
#define sp_log_warn(...)  sp_log(SP_LOG_WARN, __VA_ARGS__)
#define sp_log_error(...) sp_log(SP_LOG_ERROR, __VA_ARGS__)

#endif
