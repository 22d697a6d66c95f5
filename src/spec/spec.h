/*
 * spec: job specs (YAML, `kind: Job`) parsed, validated and defaulted.
 *
 * The parser works on libfyaml's document tree so every error can name
 * file:line:column, the field path ("resources.gpus") and what is allowed.
 * JSON is accepted too (it is YAML). A parsed spec is a plain struct owned
 * by the caller and released with kn_job_spec_free.
 */
#ifndef KILN_SPEC_H
#define KILN_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

/* A spec is refused above this size: it is text a person wrote. */
#define KN_SPEC_MAX_BYTES (256 * 1024)
#define KN_SPEC_MAX_TASKS 1024
#define KN_SPEC_MAX_PRIORITY 1000
#define KN_SPEC_MAX_RETRIES 100
/* Elements of one job array: each is a job row, a queue entry and a spec
   in the server's memory, so one submit may not add more than this. */
#define KN_SPEC_MAX_ARRAY 10000
#define KN_MILLI 1000 /* resources.gpus and cpus are stored in thousandths */
/* Whole GPUs per task: the most one machine carries. */
#define KN_SPEC_MAX_GPUS 8
/* CPUs per task: above any machine kiln schedules onto, and keeps
 * cpu_milli well inside an int. */
#define KN_SPEC_MAX_CPUS 1024
/* The kernel's own ceiling on processes (pid_max). */
#define KN_SPEC_MAX_PIDS 4194304

struct kn_kv {
	char *key;
	char *value;
};

struct kn_toleration {
	char *key;
	char *operator_; /* "Equal" (default) or "Exists" */
	char *value;     /* NULL with Exists */
	char *effect;    /* "NoSchedule", "PreferNoSchedule" or NULL (any) */
};

/* How tasks sharing one GPU (a fractional resources.gpus) share it. */
enum kn_sharing { KN_SHARING_TIME_SLICING = 0, KN_SHARING_MPS };

struct kn_resources {
	/*
	 * GPUs per task in thousandths: 2000 = two whole GPUs, 500 = half of
	 * one (a share), 0 = none. Whole counts are 1..8 GPUs; a share is
	 * 1..999. Mutually exclusive with mig_profile.
	 */
	int gpu_milli;
	char *mig_profile; /* "1g.10gb" from "mig:1g.10gb", or NULL */
	char **gpu_models; /* acceptable models, NULL-terminated, or NULL */
	size_t n_gpu_models;
	int cpu_milli;        /* 0 = not requested */
	int64_t memory_bytes; /* 0 = not requested */
	enum kn_sharing sharing; /* with a share only; default time-slicing */
	/* Processes the task may have at once, 16..KN_SPEC_MAX_PIDS;
	   0 = the server's --pids-max. */
	int pids;
};

struct kn_checkpoint_policy {
	bool set;          /* the spec had a checkpoint: section */
	int64_t every_ms;  /* default 10m */
	int keep;          /* default 3 */
	char *store;       /* a configured store's name or a URL; NULL =
			      the server's default */
	int64_t grace_ms;  /* default 30s */
	int signal;        /* default SIGTERM; names like "SIGUSR1" or "USR1" */
};

enum kn_spread { KN_SPREAD_NONE = 0, KN_SPREAD_ZONE, KN_SPREAD_FAULT_DOMAIN };

enum kn_affinity_op {
	KN_AFFINITY_IN = 0,
	KN_AFFINITY_NOT_IN,
	KN_AFFINITY_EXISTS,
	KN_AFFINITY_DOES_NOT_EXIST,
};

/* One placement.affinity term: values with In and NotIn only. */
struct kn_affinity_term {
	char *key;
	enum kn_affinity_op op;
	char **values; /* NULL-terminated, or NULL */
	size_t n_values;
	int weight;    /* preferred terms: 1..100; required ones: 0 */
};

struct kn_placement_spec {
	struct kn_kv *selector;
	size_t n_selector;
	struct kn_toleration *tolerations;
	size_t n_tolerations;
	enum kn_spread spread;
	struct kn_affinity_term *required;  /* all must hold */
	size_t n_required;
	struct kn_affinity_term *preferred; /* weights add up */
	size_t n_preferred;
};

/*
 * One entry of a job's `inputs:`: a file path (relative to the spec
 * file's directory) or a file://, http:// or https:// store URL, fetched
 * by the shim into $KILN_INPUT_DIR/<name> before the task starts.
 */
struct kn_job_input {
	char *text; /* as written */
	char *name; /* its last path segment: unique within the job */
	/* What the shim fetches: a URL as written; a path only once
	   kn_job_spec_resolve_inputs made it file:///ABSOLUTE, else NULL. */
	char *url;
	int line, column; /* where it was written, for later messages */
};

#define KN_SPEC_MAX_INPUTS 64

/* The start of a task's reason when an input's digest differs from the
   one recorded for the job's first attempt (retrying is no use). */
#define KN_INPUT_CHANGED_PREFIX "input changed: "

/*
 * A job array: count independent elements with indexes first ..
 * first + count - 1, at most parallel running at once (0 = no limit).
 * count 0 means the job is not an array. The server sets job_id (the
 * first element's id) and index on each element's own copy.
 */
struct kn_job_array {
	int first;
	int count;
	int parallel;
	int64_t job_id; /* 0 until the server made the elements */
	int index;
};

/*
 * Read "A-B" or "A-B%P" (Slurm's --array form: indexes A..B, at most P at
 * once) into *out. 0, or -EINVAL with why filled (what is wrong, without
 * position); *out is written only on success.
 */
int kn_job_array_parse(const char *text, struct kn_job_array *out, char *why,
		       size_t why_len);

/*
 * An element's place as its tasks see it, under kiln's names and Slurm's
 * (KILN_ARRAY_INDEX, SLURM_ARRAY_TASK_ID, ...), so a script written for
 * `sbatch --array` reads its index unchanged: add(ctx, NAME, VALUE) for
 * each variable in turn.
 */
void kn_job_array_env(const struct kn_job_array *a,
		      void (*add)(void *ctx, const char *name,
				  long long value),
		      void *ctx);

/*
 * What makes a job a dev environment (`kind: DevEnvironment`,
 * docs/devenv.md): a long-running interactive task that kiln stops when
 * it sits idle, and whose home directory outlives it.
 */
struct kn_devenv_policy {
	bool set;                /* the spec is a DevEnvironment */
	int64_t idle_timeout_ms; /* stop after this long idle; default 1h */
	int64_t max_duration_ms; /* stop after this long regardless; 0 = none */
	/* A GPU busy less than this share of its time (thousandths) is
	   idle; default 50 (5%). */
	int idle_gpu_milli;
};

struct kn_job_spec {
	char *name;        /* required: [a-z0-9][a-z0-9-_.]{0,62} */
	char **command;    /* required, argv, NULL-terminated, >= 1 element */
	size_t n_command;
	struct kn_kv *env; /* names [A-Za-z_][A-Za-z0-9_]* */
	size_t n_env;
	char *workdir;     /* NULL = the task directory */
	struct kn_resources resources;
	int tasks;          /* gang size, default 1, 1..KN_SPEC_MAX_TASKS */
	int retries;        /* default 0 */
	int64_t backoff_ms; /* first retry delay, default 10s, doubling */
	int64_t backoff_max_ms; /* cap of the doubling, default 10m */
	int priority;       /* 0..1000, default 0 */
	bool preemptible;
	int64_t timeout_ms; /* 0 = none */
	struct kn_checkpoint_policy checkpoint;
	struct kn_placement_spec placement;
	/* Container image: the Slurm executor's (pyxis's --container-image)
	   and the Kubernetes executor's pods'; not the local one's. NULL =
	   none. */
	char *image;
	struct kn_job_input *inputs; /* `inputs:`, or NULL */
	size_t n_inputs;
	struct kn_job_array array; /* `array:`; count 0 = a single job */
	/* The task's first process runs on a terminal that `kiln attach`
	   reaches (`kiln run -it`); local executor. */
	bool tty;
	struct kn_devenv_policy devenv; /* set: a DevEnvironment */
};

/*
 * Parse and validate a job spec, or a dev environment's (`kind:
 * DevEnvironment`: one task, spec->devenv set, the command
 * ["sleep", "infinity"] unless given). filename is used only in messages
 * ("job.yaml:3:9: resources.gpus: ..."). On error returns a negative errno,
 * err->code is KN_EINVAL (KN_ETOOBIG above KN_SPEC_MAX_BYTES), err->field is
 * the field path and err->message the whole sentence with its position.
 * On success *out owns a new spec.
 */
int kn_job_spec_parse(const char *text, size_t len, const char *filename,
		      struct kn_job_spec **out, struct kn_error *err);

/* Free a spec; NULL is fine. */
void kn_job_spec_free(struct kn_job_spec *spec);

/*
 * Give every path in spec->inputs its file:///ABSOLUTE url: relative
 * paths are joined to dir (the spec file's directory). With dir NULL a
 * relative path is -EINVAL, the message "FILE:LINE:COL: inputs[I]: ..."
 * (filename as given to kn_job_spec_parse).
 */
int kn_job_spec_resolve_inputs(struct kn_job_spec *spec, const char *dir,
			       const char *filename, struct kn_error *err);

/*
 * KILN_INPUTS, what the shim fetches (docs/workflows.md's format), from
 * a list of inputs as kn_job_spec_to_json gives them ({input, name,
 * url}, perhaps with recorded digests): each gains its store (its URL up
 * to the last '/', "file:///" for a file at the root) and blob (the
 * rest). Entries without such a URL are passed as they are. A new
 * string; inputs is changed.
 */
char *kn_job_inputs_for_shim(json_t *inputs);

/*
 * Whether job, read from its own file (filename) for step number step of
 * the workflow file workflow, suits a step: its inputs belong on the step
 * (an inline job's are refused while parsing). 0 or -EINVAL naming the
 * first input.
 */
int kn_job_spec_check_step_job(const struct kn_job_spec *job,
			       const char *filename, size_t step,
			       const char *workflow, struct kn_error *err);

/*
 * The normalized spec as JSON (every field, defaults filled in, durations in
 * milliseconds, gpus as a number or "mig:<profile>"). New reference.
 */
json_t *kn_job_spec_to_json(const struct kn_job_spec *spec);

/* Signal number from "SIGTERM", "TERM", "USR1", "15"; -1 if unknown. */
int kn_signal_from_name(const char *name);

/*
 * The spec in the form kn_job_spec_parse reads (command, env, resources
 * with gpus as a number or "mig:<profile>", durations as "1500ms", ...):
 * parsing it back gives the same spec. The server stores a deployment's
 * replicas as jobs written this way, name replacing the spec's when not
 * NULL. Returns compact JSON text (malloc'd).
 */
char *kn_job_spec_to_input_text(const struct kn_job_spec *spec,
				const char *name);

/* ---- deployments (`kind: Deployment`) ---- */

#define KN_SPEC_MAX_REPLICAS 64

/* An HTTP probe on 127.0.0.1:KILN_PORT. */
struct kn_probe {
	bool set;              /* the spec had this probe */
	char *path;            /* "/health" */
	int64_t period_ms;     /* default 5s */
	int failure_threshold; /* default 3 */
	int64_t initial_delay_ms; /* default 0 */
};

/*
 * A deployment's `revalidate:` (docs/deployments.md): the model alias it
 * serves re-validated on a schedule, as `kiln model revalidate` sets.
 */
#define KN_REVALIDATE_METRIC_MAX 64 /* as the registry's metric names */
struct kn_deployment_revalidate {
	/* The evaluation job: a file (as written, relative to the
	   deployment's file) or an inline job; exactly one is set. */
	char *job_file;
	struct kn_job_spec *job;
	int64_t every_ms;   /* 1s..366d */
	json_t *thresholds; /* {"max": {metric: n}, "min": {metric: n}} */
	bool rollback;
};

struct kn_deployment_spec {
	/*
	 * First, so the Job field readers fill it: name, command, env,
	 * workdir, resources, placement (spread), priority, backoff and
	 * backoff_max (defaults 1s and 1m here: a replica comes back fast).
	 * tasks is 1.
	 */
	struct kn_job_spec job;
	char *model;      /* required: a path, or "job:<id>" */
	int64_t model_job; /* the <id> of "job:<id>", else 0 */
	int replicas;     /* default 1, 0..KN_SPEC_MAX_REPLICAS */
	struct kn_probe readiness;
	struct kn_probe liveness;
	char *fallback;   /* another deployment's name, or NULL */
	int limit_rpm;    /* gateway limits per deployment, 0 = none */
	int limit_tpm;
	char *preset;     /* the preset's name, or NULL */
	/* Only with model: NAME@ALIAS; NULL when not given. */
	struct kn_deployment_revalidate *revalidate;
};

/* A model preset (data/model-presets.csv), with what it asks for. */
struct kn_model_preset {
	char *name;          /* "llama-3-8b" */
	double parameters_b; /* billions of parameters */
	char *dtype;         /* fp32, fp16, bf16, int8, int4 */
	double kv_headroom;  /* share of the weights added for KV cache */
	char *gpu_model;     /* "A10-24GB", or NULL for a CPU model */
	double memory_gb;    /* weights plus headroom, in GB */
	int gpus;            /* GPUs of gpu_model that hold memory_gb */
	int64_t memory_bytes; /* CPU models: host memory asked for */
};

struct kn_model_presets;

/*
 * Read a preset table (CSV, header name,parameters_b,dtype,kv_headroom,
 * gpu_model,source). Errors name path:line and the column. *out is the
 * caller's, freed with kn_model_presets_free.
 */
int kn_model_presets_load(const char *path, struct kn_model_presets **out,
			  struct kn_error *err);
/* The table shipped with kiln (model-presets.csv, see kn_data_path). */
int kn_model_presets_load_shipped(struct kn_model_presets **out,
				  struct kn_error *err);
/* The same from text in memory (path is used in messages). */
int kn_model_presets_parse(const char *text, size_t len, const char *path,
			   struct kn_model_presets **out,
			   struct kn_error *err);
void kn_model_presets_free(struct kn_model_presets *p);
/* The preset of that name, or NULL. */
const struct kn_model_preset *
kn_model_preset_find(const struct kn_model_presets *p, const char *name);
/* The i-th preset (0-based) or NULL past the end. */
const struct kn_model_preset *
kn_model_preset_at(const struct kn_model_presets *p, size_t i);

/*
 * Parse and validate a deployment spec, errors as kn_job_spec_parse's.
 * presets may be NULL, and then `preset:` is an error. A preset fills
 * resources.gpus, resources.gpu_model (and memory for a CPU model); what
 * the spec's resources name overrides it.
 */
int kn_deployment_spec_parse(const char *text, size_t len,
			     const char *filename,
			     const struct kn_model_presets *presets,
			     struct kn_deployment_spec **out,
			     struct kn_error *err);
void kn_deployment_spec_free(struct kn_deployment_spec *spec);
/* The normalized deployment as JSON (its job part as kn_job_spec_to_json). */
json_t *kn_deployment_spec_to_json(const struct kn_deployment_spec *spec);

/* ---- workflows (`kind: Workflow`) ---- */

#define KN_SPEC_MAX_STEPS 64

/* What a failed step does to the run. */
enum kn_on_failure {
	KN_ON_FAILURE_STOP,     /* nothing new starts; the run fails */
	KN_ON_FAILURE_CONTINUE, /* steps that do not need it go on */
	KN_ON_FAILURE_RETRY,    /* run it again, up to retries times */
};

enum kn_step_kind {
	KN_STEP_JOB,      /* a job spec, inline or from a file */
	KN_STEP_REGISTER, /* push a job step's outputs to the model registry */
	KN_STEP_DEPLOY,   /* roll a deployment to a registered version */
};

enum kn_compare { KN_CMP_LT, KN_CMP_LE, KN_CMP_GT, KN_CMP_GE, KN_CMP_EQ,
		  KN_CMP_NE };

/*
 * One comparison of a `when:` ("eval.metrics.loss < 1.8",
 * "train.outcome == succeeded"); a step's comparisons must all hold.
 */
struct kn_condition {
	char *step;   /* an earlier step this one needs, directly or not */
	char *metric; /* STEP.metrics.NAME: NAME; NULL for STEP.outcome */
	enum kn_compare op;
	double number;  /* with metric */
	char *outcome;  /* without: succeeded, failed or skipped (== or !=) */
};

/* What a node must offer before a step starts there (`requires:`). */
struct kn_requirements {
	bool set;
	char *gpu_model;      /* NULL = any */
	int gpu_count;        /* 0 = no GPU needed */
	char *driver_min;     /* "535.104", compared part by part; or NULL */
	char *cuda_min;       /* "12.2"; or NULL */
	char **commands;      /* on PATH */
	size_t n_commands;
	char **python_modules; /* importable by python3 */
	size_t n_python_modules;
	char *scratch_path;   /* with scratch_bytes free; NULL = none */
	int64_t scratch_bytes;
	bool store;           /* the run's blob store answers */
};

/* An input: an earlier step's output ("train.outputs/w.bin") or a path
   or store URL taken as it is. */
struct kn_step_input {
	char *text;   /* as written */
	char *step;   /* the producing step, or NULL */
	char *path;   /* the file under its outputs, with step */
};

struct kn_workflow_step {
	char *name;
	enum kn_step_kind kind;
	char **needs;
	size_t n_needs;
	enum kn_on_failure on_failure; /* the workflow's unless set */
	bool on_failure_set;
	int retries;                   /* with retry: default 1 */
	struct kn_condition *when;
	size_t n_when;
	struct kn_requirements requires; /* the workflow's unless set */
	struct kn_step_input *inputs;
	size_t n_inputs;
	/* KN_STEP_JOB: job_file (relative to the workflow's file) or job. */
	char *job_file;
	struct kn_job_spec *job;
	/* KN_STEP_REGISTER: from (a job step), model name, alias, signer. */
	char *from;
	char *model;
	char *alias;
	char *signer; /* a signer the server holds by name, or NULL:
			 unsigned */
	/* KN_STEP_DEPLOY: the deployment, rolled to from's version. */
	char *deployment;
};

struct kn_workflow_spec {
	char *name;
	enum kn_on_failure on_failure; /* default stop */
	struct kn_requirements requires;
	struct kn_workflow_step *steps;
	size_t n_steps;
	/* The steps in an order where every step follows what it needs
	   (file order among independent ones): indexes into steps. */
	size_t *order;
};

/*
 * Parse and check a workflow: every name unique and valid, needs naming
 * existing steps without cycles (the error names the cycle: "a -> b ->
 * a"), when/inputs/from reading only steps the step needs (directly or
 * through others), exactly one of job, register or deploy per step.
 * Errors as kn_job_spec_parse's, with paths such as steps[2].needs[0].
 */
int kn_workflow_spec_parse(const char *text, size_t len, const char *filename,
			   struct kn_workflow_spec **out, struct kn_error *err);
void kn_workflow_spec_free(struct kn_workflow_spec *spec);
/* The step named name, or NULL. */
const struct kn_workflow_step *kn_workflow_step_find(
	const struct kn_workflow_spec *spec, const char *name);
/* Whether step a needs step b, directly or through other steps. */
bool kn_workflow_depends(const struct kn_workflow_spec *spec, size_t a,
			 size_t b);
/* The normalized workflow as JSON (inline jobs as kn_job_spec_to_json). */
json_t *kn_workflow_spec_to_json(const struct kn_workflow_spec *spec);

/* Whether s is a valid job or deployment name ([a-z0-9][a-z0-9._-]{0,62}). */
bool kn_spec_name_valid(const char *s);

/* "Job", "Deployment", "Workflow", "DevEnvironment", or NULL when the
   text names none of them (or no kind). */
const char *kn_spec_kind(const char *text, size_t len);

/* --- options: one table for a program's flags and its config file ------- */

/* Strings (and lists) an options target holds, freed together. */
struct kn_strpool {
	void **v;
	size_t n, cap;
};
/* A copy of s that lives until the pool is released. */
char *kn_strpool_keep(struct kn_strpool *pool, const char *s);
void kn_strpool_release(struct kn_strpool *pool);

enum kn_option_kind {
	KN_OPT_STRING,   /* const char * at offset (choices: one of them) */
	KN_OPT_PATH,     /* const char *, a file or directory */
	KN_OPT_DURATION, /* int64_t milliseconds, min..max */
	KN_OPT_SIZE,     /* int64_t bytes, min..max */
	KN_OPT_COUNT,    /* int64_t, min..max */
	KN_OPT_BOOL,     /* bool; as a flag it takes no argument */
	KN_OPT_LIST,     /* const char ** at offset, size_t at count_offset;
			    a repeatable flag, a list of strings in a file */
};

/* DURATION: a bare 0 is accepted and means none. */
#define KN_OPT_ZERO_IS_NONE 0x1u
/* BOOL: the option sets the field to false (--no-local-metrics). */
#define KN_OPT_CLEARS 0x2u
/* PATH: must be absolute. */
#define KN_OPT_ABSOLUTE 0x4u
/* STRING, PATH: the empty string is allowed (and means "none"). */
#define KN_OPT_EMPTY_OK 0x8u
/* COUNT: the field is an int (bounds must fit one), not an int64_t. */
#define KN_OPT_INT 0x10u
/* STRING: the value is a secret (a webhook URL holds its key, a token
   is one): --print-config names the key but does not show the value. */
#define KN_OPT_SECRET 0x20u

struct kn_option;
struct kn_buf;
/* Reads text into target in place of the kind's own reading. */
typedef int (*kn_option_set_fn)(const struct kn_option *o, void *target,
				const char *text, struct kn_strpool *pool,
				struct kn_error *err);
/* Writes the value in target as the config file would give it. */
typedef void (*kn_option_show_fn)(const struct kn_option *o,
				  const void *target, struct kn_buf *out);

/*
 * One option: its flag is --NAME, its config file key NAME. Bounds of 0
 * are none (max) or 0 (min). Messages from reading a value name neither the
 * flag nor the file: the caller puts "--NAME: " or "FILE:L:C: NAME: "
 * before them.
 */
struct kn_option {
	const char *name;
	enum kn_option_kind kind;
	const char *arg;     /* the value's name in help: "HOST:PORT" */
	size_t offset;       /* the field in the target struct */
	size_t count_offset; /* LIST: its size_t count */
	int64_t min, max;
	unsigned flags;
	const char *const *choices; /* STRING: NULL-terminated, or NULL */
	const char *example;        /* shown after a bad value: "5m" */
	kn_option_set_fn set;       /* custom reading, or NULL */
	const char *help;           /* one line */
	kn_option_show_fn show;     /* custom showing, or NULL */
};

/*
 * Read text as o says into target; strings are copied into pool. LIST
 * appends. Returns 0, or -EINVAL with err saying what the value must be.
 * target is untouched on failure.
 */
int kn_option_set(const struct kn_option *o, void *target, const char *text,
		  struct kn_strpool *pool, struct kn_error *err);
/*
 * Append o's value in target to out as YAML that kn_option_set reads
 * back: a string quoted, ~ when unset, a duration such as 90s or 5m, a
 * size such as 16Gi, true or false, a list as [..].
 */
void kn_option_show(const struct kn_option *o, const void *target,
		    struct kn_buf *out);
/* Empty a LIST option's list (the command line replaces the file's). */
void kn_option_clear(const struct kn_option *o, void *target);
/* The option named name, or NULL. */
const struct kn_option *kn_option_find(const struct kn_option *opts,
				       size_t n, const char *name);

/* --- the server's config file: options plus named sections -------------- */

/* A signing key the server holds by name, and who may sign with it. */
struct kn_signer_conf {
	char *name;
	char *key_file;
	char **roles;  /* token roles allowed to sign with it */
	size_t n_roles;
	char **tokens; /* token names allowed to sign with it */
	size_t n_tokens;
};

/* A named blob store and where its credential comes from. */
struct kn_store_conf {
	char *name;
	char *url;
	char *credential_env;  /* an environment variable's name, or NULL */
	char *credential_file; /* a file holding the secret, or NULL */
};

/* What a config file holds besides options. */
struct kn_server_conf {
	struct kn_signer_conf *signers;
	size_t n_signers;
	struct kn_store_conf *stores;
	size_t n_stores;
};

/* Where a config file set an option: its key's line and column (from 1),
   both 0 when the file did not set it. */
struct kn_option_origin {
	int line, column;
};

/*
 * Parse a server config file: a mapping whose keys are the options'
 * names, read with kn_option_set into target, and the sections signers:
 * and stores: into *out. The tls-* options (and insecure) may also be
 * given grouped as tls: {cert, key, client_ca, ...}. An empty file is no
 * options. With origins (n_opts of them, or NULL) each option's key
 * position is recorded. Errors are "FILE:LINE:COLUMN: KEY: message".
 * *out and origins are written only on success; target may be half-set
 * on failure.
 */
int kn_server_conf_parse(const char *text, size_t len, const char *filename,
			 const struct kn_option *opts, size_t n_opts,
			 void *target,
			 struct kn_strpool *pool, struct kn_server_conf *out,
			 struct kn_option_origin *origins,
			 struct kn_error *err);
void kn_server_conf_release(struct kn_server_conf *conf);
/* The same for a file of options alone (no sections). */
int kn_option_conf_parse(const char *text, size_t len, const char *filename,
			 const struct kn_option *opts, size_t n_opts,
			 void *target, struct kn_strpool *pool,
			 struct kn_option_origin *origins,
			 struct kn_error *err);

#endif
