/* grammar_defaults.h: the defaults of the grammar limits that `spindle serve` also
 * takes as settings, written once. grammar/'s gram_limits_default() and
 * gram_schema_options_default() and config/cfg.c's cfg_settings_init() all read them:
 * config/ may not include grammar/, so the numbers live in the layer below both (as
 * common/sched_defaults.h does for the scheduler's knobs). */
#ifndef SP_GRAMMAR_DEFAULTS_H
#define SP_GRAMMAR_DEFAULTS_H

/* rules one constraint may compile to: gram_limits.max_rules, grammar_max_rules */
#define SP_GRAMMAR_DEFAULT_MAX_RULES 20000

/* elements of all its rules: gram_limits.max_elements, grammar_max_states */
#define SP_GRAMMAR_DEFAULT_MAX_ELEMENTS 400000

/* nesting of a matching state's stack: gram_limits.max_depth, grammar_max_depth */
#define SP_GRAMMAR_DEFAULT_MAX_DEPTH 1024

/* nesting of JSON Schema subschemas and $refs: gram_schema_options.max_depth,
 * grammar_schema_max_depth */
#define SP_GRAMMAR_DEFAULT_SCHEMA_MAX_DEPTH 32

#endif
