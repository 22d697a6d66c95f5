/*
 * cli: what the kiln subcommands share — the command table's shape, the
 * global options, exit statuses, one flag parser, and formatting for humans
 * (aligned tables, times, sizes, GPU amounts).
 *
 * A subcommand is an entry, `const struct cli_command cmd_x_entry` at the
 * top of the file that implements it, whose run is a cli_runner; it
 * returns the process exit status and prints its own messages. Data a
 * script may capture (ids, secrets, tables, JSON) goes to stdout;
 * everything said to a person goes to stderr.
 *
 * The server and the task shim keep the plain `int f(int argc, char **argv)`
 * shape (their entries' run_raw): they get their arguments untouched,
 * since the CLI's global flags mean nothing to them.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* Exit statuses, documented in `kiln --help` and docs/cli.md. */
enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAIL = 1,         /* API error, invalid spec, not found */
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_UNREACHABLE = 3,  /* no server configured, or none answers */
	CLI_EXIT_JOB_FAILED = 4,   /* submit --wait */
	CLI_EXIT_JOB_CANCELLED = 5,/* submit --wait */
};

/* cli_parse's answer when there is no exit status yet: carry on. */
#define CLI_GO (-1)

struct cli_ctx;

/*
 * What runs a subcommand or a verb of one, argv[0] its own name: the exit
 * status. A file declares its own with it (static cli_runner cmd_ls;).
 */
typedef int cli_runner(struct cli_ctx *ctx, int argc, char **argv);

struct cli_command {
	const char *name;
	/* Exactly one of run and run_raw is set. */
	cli_runner *run;
	int (*run_raw)(int argc, char **argv);
	const char *summary; /* one line for `kiln --help` */
	const char *help;    /* usage and flags, for `kiln NAME --help` */
	bool hidden;         /* internal: left out of `kiln --help` */
};

/* The global flags, set before or after the subcommand's name. */
struct cli_ctx {
	const char *server; /* --server, or NULL */
	const char *token;  /* --token, or NULL */
	/* -o: "table" (default), "wide", "json", "yaml", or "name" and
	   "csv" where the command takes them. */
	const char *output;
	bool no_headers;    /* --no-headers: tables without their header row */
	bool csv_ok;        /* the command also takes -o csv */
	bool name_ok;       /* the command also takes -o name */
	const struct cli_command *cmd; /* the subcommand running, or NULL */
	char prog[64];      /* "kiln ls", "kiln token create": message prefix */
};

/*
 * Each command's entry, with its summary and help, stands at the top of
 * the file that implements it; kiln.c lists them in this order, the one
 * `kiln --help` prints.
 */
extern const struct cli_command cmd_server_entry;
extern const struct cli_command cmd_submit_entry;
extern const struct cli_command cmd_ls_entry;
extern const struct cli_command cmd_show_entry;
extern const struct cli_command cmd_port_forward_entry;
extern const struct cli_command cmd_logs_entry;
extern const struct cli_command cmd_run_entry;
extern const struct cli_command cmd_attach_entry;
extern const struct cli_command cmd_exec_entry;
extern const struct cli_command cmd_cancel_entry;
extern const struct cli_command cmd_evict_entry;
extern const struct cli_command cmd_drain_entry;
extern const struct cli_command cmd_cordon_entry;
extern const struct cli_command cmd_uncordon_entry;
extern const struct cli_command cmd_nodes_entry;
extern const struct cli_command cmd_pools_entry;
extern const struct cli_command cmd_token_entry;
extern const struct cli_command cmd_deploy_entry;
extern const struct cli_command cmd_deployments_entry;
extern const struct cli_command cmd_scale_entry;
extern const struct cli_command cmd_undeploy_entry;
extern const struct cli_command cmd_rollout_entry;
extern const struct cli_command cmd_key_entry;
extern const struct cli_command cmd_model_entry;
extern const struct cli_command cmd_workflow_entry;
extern const struct cli_command cmd_alerts_entry;
extern const struct cli_command cmd_events_entry;
extern const struct cli_command cmd_audit_entry;
extern const struct cli_command cmd_backup_entry;
extern const struct cli_command cmd_validate_entry;
extern const struct cli_command cmd_sim_entry;
extern const struct cli_command cmd_render_entry;
extern const struct cli_command cmd_kube_scheduler_entry;
extern const struct cli_command cmd_exporter_entry;
extern const struct cli_command cmd_gateway_entry;
extern const struct cli_command cmd_health_entry;
extern const struct cli_command cmd_advise_entry;
extern const struct cli_command cmd_cost_entry;
extern const struct cli_command cmd_tune_entry;
extern const struct cli_command cmd_blob_entry;
extern const struct cli_command cmd_ckpt_entry;
extern const struct cli_command cmd_openapi_entry;
extern const struct cli_command cmd_ui_entry;
extern const struct cli_command cmd_version_entry;
extern const struct cli_command cmd_man_entry;
extern const struct cli_command cmd_completion_entry;
extern const struct cli_command cmd_bench_entry;
extern const struct cli_command cmd_shim_entry;

/* kiln.c: the entries in order, one by its name, and `kiln --help`. */
const struct cli_command *const *cli_commands(size_t *n);
const struct cli_command *cli_find_command(const char *name);
void cli_print_help(FILE *f);

/* cmd_server_help.c: `kiln server --help`, every option, exit codes. */
extern const char cmd_server_help[];

struct cli_client;
/*
 * cmd_logs.c, also for `kiln submit --follow`: wait until job id runs an
 * attempt numbered above after (saying so on stderr while it is queued).
 * Returns 0 once it does, CLI_EXIT_FAIL when it ended first, with *job
 * (a new reference) as last seen; or another exit status after printing
 * why, *job NULL.
 */
int cli_wait_started(struct cli_client *c, int64_t id, int after,
		     json_t **job);
/*
 * Follow every rank of attempt (0: the latest) of job id, which has tasks
 * ranks, each line prefixed "[rank N] ", until all have ended. Returns 0
 * or the exit status of a stream that failed.
 */
int cli_logs_follow(const struct cli_ctx *ctx, struct cli_client *c,
		    int64_t id, int attempt, int tasks, unsigned stream);
/*
 * cmd_port_forward.c, also for `kiln attach --port`: listen on
 * address:LOCAL of ports ("LOCAL:REMOTE") and carry each connection to
 * port REMOTE of task of job id from threads of its own, until the
 * process ends; says where on stderr. 0, or the exit status after
 * printing why not.
 */
int cli_port_forward_start(const struct cli_ctx *ctx, struct cli_client *c,
			   int64_t id, int task, const char *ports,
			   const char *address);
struct kn_nvml;
/*
 * cmd_tune.c, also for `kiln exporter`: load NVML for a command that can
 * do without GPUs. CLI_GO with *nv open; CLI_EXIT_OK after saying "PROG:
 * none (why)" on stderr when the machine has no usable GPU; or
 * CLI_EXIT_FAIL after printing the error.
 */
int cli_nvml_open(const struct cli_ctx *ctx, const char *none,
		  struct kn_nvml **nv);

/* Flags. */

enum cli_flag_type {
	CLI_FLAG_BOOL,   /* dest is bool *, set to true */
	CLI_FLAG_STRING, /* dest is const char **, pointing into argv */
	CLI_FLAG_COUNT,  /* dest is int *, a whole number 0..INT_MAX */
	CLI_FLAG_LIST,   /* dest is struct cli_list *: every value given */
};

/* A repeatable flag's values, pointing into argv; the caller frees v. */
struct cli_list {
	const char **v;
	size_t n;
};

struct cli_flag {
	const char *name; /* long name without dashes; NULL ends a table */
	char short_name;  /* 'f' for -f, or 0 */
	enum cli_flag_type type;
	void *dest;
};

/*
 * Parse a subcommand's arguments (argv[0] is its name): its own flags
 * (`--name V`, `--name=V`, `-f`), the global flags anywhere, -h/--help,
 * `--` and positionals. With pos_name set exactly one positional is wanted
 * and stored in *pos ("-" counts as one); with pos_name NULL none is.
 * Returns CLI_GO to carry on, CLI_EXIT_OK after printing the command's
 * help, or CLI_EXIT_USAGE after printing what is wrong.
 */
int cli_parse(struct cli_ctx *ctx, int argc, char **argv,
	      const struct cli_flag *flags, const char *pos_name,
	      const char **pos);

/*
 * As cli_parse, for commands with several positionals: up to max_pos of
 * them are stored in pos[] and counted in *n_pos (the caller checks how
 * many it wants); one more is a usage error.
 */
int cli_parse_positionals(struct cli_ctx *ctx, int argc, char **argv,
			  const struct cli_flag *flags, const char **pos,
			  size_t max_pos, size_t *n_pos);

/*
 * Take the flag at argv[*i] (and its value, advancing *i) from flags (may
 * be NULL) or the global flags. Returns CLI_GO, or CLI_EXIT_USAGE after
 * printing an unknown flag (with a "did you mean") or a missing value.
 */
int cli_take_flag(struct cli_ctx *ctx, const struct cli_flag *flags,
		  int argc, char **argv, int *i);

struct kn_option_origin;
/* What cli_config_load read, for --print-config. */
struct cli_config {
	const char *path;                 /* the file read, or NULL */
	struct kn_option_origin *origins; /* per row of the flag table */
};

/*
 * Before cli_parse, for commands whose table has a "config" flag: read
 * `--config FILE` (YAML, each key a long flag of flags, each value what
 * it takes: a string, a number, or true/false for a flag without one;
 * the TLS flags also as tls: {cert, key, client_ca}) into the flags'
 * destinations, so the command line then wins. CLI_GO, or
 * CLI_EXIT_USAGE after printing "FILE:LINE:COLUMN: KEY: what is wrong"
 * (an unknown key, a key given twice, a bad value). conf is filled
 * either way; release it with cli_config_release.
 */
int cli_config_load(struct cli_ctx *ctx, const struct cli_flag *flags,
		    int argc, char **argv, struct cli_config *conf);
void cli_config_release(struct cli_config *conf);
/*
 * After cli_parse: --print-config's output on stdout, each key's value
 * in effect (flag over file over default) as the file would give it, and
 * where it came from: --FLAG, FILE:LINE:COLUMN or default.
 */
void cli_config_print(struct cli_ctx *ctx, const struct cli_flag *flags,
		      const struct cli_config *conf, int argc, char **argv);
/* One key's line of it, o's value in target; a KN_OPT_SECRET one set is
   printed commented out without its value. */
struct kn_option;
void cli_config_print_line(const struct kn_option *o, const void *target,
			   bool given, const char *path,
			   struct kn_option_origin origin);
/* A listen key, HOST:PORT or [V6]:PORT, into host (without brackets) and
   *port; CLI_GO, or a usage error naming --listen and example. */
int cli_parse_listen(struct cli_ctx *ctx, const char *listen,
		     const char *example, char *host, size_t cap, long *port);

/* After parsing: CLI_GO, or CLI_EXIT_USAGE when -o is not table, wide,
   json or yaml (or csv, name where the command set csv_ok, name_ok). */
int cli_check_output(struct cli_ctx *ctx);

/* -o json or -o yaml was asked for: the data, printed by cli_print_data. */
bool cli_want_json(const struct cli_ctx *ctx);
/* -o name: one identifier a line (job ids, node names), for scripts. */
bool cli_want_name(const struct cli_ctx *ctx);
/* -o wide: tables with every column and nothing cut. */
bool cli_want_wide(const struct cli_ctx *ctx);

/* Print "PROG: message" to stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const struct cli_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Print "PROG: message" to stderr; returns CLI_EXIT_FAIL. */
int cli_fail(const struct cli_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * The closest of names (NULL-terminated) to word, or NULL when none is
 * close enough to be a likely typo.
 */
const char *cli_closest(const char *word, const char *const *names);

/*
 * CLI_GO when word is one of names (NULL-terminated); otherwise a usage
 * error that names the closest ("no role 'admn'; did you mean 'admin'?")
 * or, with none close, them all ("no role 'x'; roles are viewer, ... and
 * admin").
 */
int cli_check_choice(const struct cli_ctx *ctx, const char *what,
		     const char *plural, const char *word,
		     const char *const *names);

/*
 * Split the comma list given to --flag into items, NULL-terminated, in
 * the malloc'd copy *buf (freed by the caller either way). CLI_GO, or a
 * usage error for an empty entry, one that is not an absolute path when
 * paths is set, or more than max - 1 of them.
 */
int cli_split_list(const struct cli_ctx *ctx, const char *flag,
		   const char *arg, bool paths, char **buf, const char **items,
		   size_t max);

/* A verb of a command with several (`kiln token create`). */
struct cli_verb {
	const char *name;
	cli_runner *run;
};

/*
 * Run the verb that argv names, from verbs (ended by a NULL name), with
 * ctx->prog extended by it ("kiln token ls"). Global flags may come
 * before the verb (`kiln token -o json ls`); --help prints the command's
 * help. A missing or unknown verb is a usage error listing the choices.
 */
int cli_run_verb(struct cli_ctx *ctx, int argc, char **argv,
		 const struct cli_verb *verbs);
/*
 * As cli_run_verb when the first argument past the global flags (in any
 * of their forms: `--server=URL`, `-ojson`, `--no-headers`) names a verb;
 * otherwise otherwise runs with every argument (`kiln audit --actor A`
 * is `kiln audit ls --actor A`).
 */
int cli_run_verb_or(struct cli_ctx *ctx, int argc, char **argv,
		    const struct cli_verb *verbs, cli_runner *otherwise);

/*
 * A moment given as --since or --until: a duration back from now_ms
 * ("30m", "2d"), or a UTC time "2026-12-03T04:00:00Z" (seconds and the Z
 * optional) or a date "2026-12-03": 0 with *out_ms, else -EINVAL.
 */
int cli_parse_when(const char *text, int64_t now_ms, int64_t *out_ms);
/* A job id argument: a whole number >= 1, else a usage error. */
int cli_parse_job_id(const struct cli_ctx *ctx, const char *arg,
		     int64_t *out);
/*
 * An array's elements by state ({"running": 3, ...}) as "3 running, 5
 * queued", busiest states first; "" for none.
 */
void cli_format_array_counts(json_t *counts, char *buf, size_t len);
/*
 * A job or one element of a job array: "ID" (*index = -1) or "ID[K]",
 * else a usage error.
 */
int cli_parse_job_ref(const struct cli_ctx *ctx, const char *arg,
		      int64_t *id, int64_t *index);

/*
 * Read a job spec from path ("-" = stdin), refusing more than
 * KN_SPEC_MAX_BYTES. *name is how to call it in messages ("<stdin>" for
 * "-"). Returns CLI_GO with *text (malloc'd, NUL-terminated) and *len set,
 * or CLI_EXIT_FAIL after printing why.
 */
int cli_read_spec(const struct cli_ctx *ctx, const char *path, char **text,
		  size_t *len, const char **name);
/*
 * argv parsed with flags and one argument, FILE (*file), then FILE read
 * as cli_read_spec reads it. Returns CLI_GO, or an exit status after
 * printing why.
 */
int cli_parse_spec(struct cli_ctx *ctx, int argc, char **argv,
		   const struct cli_flag *flags, const char **file,
		   char **text, size_t *len, const char **name);

/* Output. */

/* Pretty-print JSON to stdout followed by a newline. */
void cli_print_json(json_t *value);
/* value as -o asked: block YAML for yaml, else indented JSON. */
void cli_print_data(const struct cli_ctx *ctx, json_t *value);

/*
 * Copy text for a terminal, at most size - 1 bytes and a NUL: control
 * characters (newlines, escapes) and bytes that are not UTF-8 from the
 * server are shown escaped (kn_text_escape: "\n", "\x1b", "\u009b") so
 * they cannot garble or drive the terminal. Never cuts a character.
 */
void cli_clean(char *dst, const char *src, size_t size);

/* "2026-12-02T15:46:06.123Z (5m ago)", or "-" for 0. */
void cli_format_when(int64_t ms, int64_t now_ms, char *buf, size_t len);
/* Thousandths of a GPU as "1.0", "0.5", "0.125", "2.0". */
void cli_format_milli(int64_t milli, char *buf, size_t len);
/*
 * A job's resources.gpus value (number or "mig:<profile>") as "2", "0.5",
 * "mig:1g.10gb", or "0" when missing.
 */
void cli_format_gpus(json_t *gpus, char *buf, size_t len);
/* How long a job or attempt ran: ended-started, now-started, or "-". */
void cli_format_ran(int64_t started_ms, int64_t ended_ms, int64_t now_ms,
		    char *buf, size_t len);

/* A JSON object member as text: strings as-is, else "-" when absent/null. */
const char *cli_json_str(json_t *obj, const char *key);
/* A JSON object member as an integer (reals rounded), 0 when absent. */
int64_t cli_json_int(json_t *obj, const char *key);

/*
 * An aligned table: a header row, then cells added left to right, row by
 * row. Columns are two spaces apart, a row stops after its last non-empty
 * cell (no trailing spaces), and cells are cleaned with cli_clean.
 */
struct cli_table;

/* headers is NULL-terminated. */
struct cli_table *cli_table_new(const char *const *headers);
void cli_table_free(struct cli_table *t);
void cli_table_cell(struct cli_table *t, const char *text);
void cli_table_cellf(struct cli_table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A cell with obj's key as an integer, as cli_json_int. */
void cli_table_int(struct cli_table *t, json_t *obj, const char *key);
/* A cell with the strings in obj's array key joined by commas; none as
   empty says. */
void cli_table_list(struct cli_table *t, json_t *obj, const char *key,
		    const char *empty);
/* A cell with how long ago obj's key (epoch ms) was, as kn_format_ago. */
void cli_table_ago(struct cli_table *t, json_t *obj, const char *key,
		   int64_t now_ms);
/* Print to f with each line starting with indent spaces. */
void cli_table_print(const struct cli_table *t, FILE *f, int indent);

/* Width a table is cut to unless -o wide: what any terminal shows. */
#define CLI_TABLE_WIDTH 80

/*
 * Mark column col (from 0) as free text (names, reasons) that may be cut,
 * ending in "…", so that the table fits CLI_TABLE_WIDTH columns.
 */
void cli_table_cuttable(struct cli_table *t, size_t col);
/*
 * Print a listing to f as ctx asks: without the header row for
 * --no-headers, and with the cuttable columns cut to fit
 * CLI_TABLE_WIDTH unless -o wide (as much as they can: a table whose
 * other columns are wider still is printed wider).
 */
void cli_table_show(const struct cli_ctx *ctx, struct cli_table *t, FILE *f,
		    int indent);

#endif
