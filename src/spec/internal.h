/*
 * spec internals: the table-driven walk over a libfyaml document tree that
 * every kind of spec (job, deployment, workflow) is read with.
 *
 * walk.c owns the walk, its typing (the YAML 1.2 core schema) and its
 * errors, "file:line:column: path: message"; job.c, deployment.c and
 * workflow.c hold each kind's field tables and checks; job_json.c the
 * job's JSON forms. Readers fill objects on the heap as they go: on any
 * error the caller frees the half-built object.
 */
#ifndef KN_SPEC_INTERNAL_H
#define KN_SPEC_INTERNAL_H

#include "spec/spec.h"

#include <stdarg.h>

#include <libfyaml.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Field paths are short; env names may be long and are cut in messages. */
#define PATH_MAX_LEN 256
/* A bad value is quoted back in the message up to this many bytes. */
#define GOT_MAX 48
/* Room for a quoted value: each byte may become a 4-byte escape. */
#define GOT_BUF (GOT_MAX * 4 + 16)
/* Every section's field table fits in this. */
#define MAX_FIELDS 24

struct section;

/* Where the walk is: the file, the field path, the key being read. */
struct walk {
	const char *file;
	struct fy_diag *diag;
	struct kn_error *err;
	char path[PATH_MAX_LEN];
	size_t path_len;
	/* Key of the value being read: the place to point at for values
	 * that have no position of their own (an empty `workdir:`). */
	struct fy_node *key;
	const char *root_name; /* "deployment"; NULL = "job" */
};

enum value_kind { V_NULL, V_BOOL, V_INT, V_FLOAT, V_STRING, V_LIST, V_MAP };

/* A node seen through the YAML 1.2 core schema. */
struct value {
	enum value_kind kind;
	const char *text; /* scalars: NUL-terminated, owned by the document */
	size_t len;
	int count; /* lists and mappings: number of items */
};

enum field_type {
	FT_INT,      /* int at offset, within min..max */
	FT_BOOL,     /* bool at offset */
	/* int64_t milliseconds at offset, at least min; a max (not 0)
	   comes with allowed, which then names every bad value */
	FT_DURATION,
	FT_TEXT,     /* non-empty char * at offset, as allowed says */
	/* char ** at offset and its size_t length at count_offset: a
	   non-empty list of non-empty strings, as allowed says */
	FT_TEXT_LIST,
	FT_CUSTOM,   /* read() fills the target */
};

/* How one field of a mapping is read. */
typedef int (*field_read_fn)(struct walk *w, struct fy_node *value,
			     void *target);

struct field {
	const char *name;
	enum field_type type;
	size_t offset;
	int64_t min, max;
	/* FT_DURATION: a bare 0 is accepted and means "none". */
	bool zero_is_none;
	size_t count_offset;  /* FT_TEXT_LIST */
	/* FT_TEXT_LIST: "a list of ..." for messages; FT_TEXT: what the
	   text is ("a model preset's name"), NULL: "a non-empty string";
	   FT_DURATION: "a duration from 1s to 366d", for any bad value */
	const char *allowed;
	bool required;
	field_read_fn read;
};

/* A field table by its path, for "did you mean" across sections. */
struct section {
	const char *path;
	const struct field *fields;
	size_t n_fields;
};

/* What is wrong with a map key, or NULL when it is fine. */
typedef const char *(*key_problem_fn)(const char *key);

/* Reads the document's root into the object being built. */
typedef int (*spec_read_root_fn)(struct walk *w, struct fy_node *root,
				 void *obj);

/* One kind of spec document: what its root must be. */
struct spec_kind {
	const char *kind;      /* "Job": the kind: value */
	const char *root_name; /* "job": names the root in messages */
	const char *what;      /* "a job spec": "... must be a mapping" */
	const struct field *fields;
	size_t n_fields;
};

/* --- walk.c: messages, positions, paths ---------------------------------- */

/* s as a message quotes it: escaped, cut after GOT_MAX bytes. */
void spec_quote(char *buf, size_t size, const char *s, size_t len,
		bool quotes);
/* A scalar's line and column (1-based); false when it has none. */
bool spec_scalar_position(struct fy_node *node, int *line, int *col);

/*
 * Fill w->err with "file:line:col: path: message" pointing at node (or
 * without "path: " when with_path is false); return -EINVAL.
 */
int spec_vfail(struct walk *w, struct fy_node *node, bool with_path,
	       const char *fmt, va_list ap);
__attribute__((format(printf, 3, 4))) int
spec_fail(struct walk *w, struct fy_node *node, const char *fmt, ...);
__attribute__((format(printf, 3, 4))) int
spec_fail_bare(struct walk *w, struct fy_node *node, const char *fmt, ...);
/* Fail at pair's value with the field name pushed onto the path. */
__attribute__((format(printf, 4, 5))) int
spec_fail_at_pair(struct walk *w, struct fy_node_pair *pair, const char *name,
		  const char *fmt, ...);

/* Field paths: push returns the length to pop back to. */
__attribute__((format(printf, 2, 3))) size_t
spec_path_push(struct walk *w, const char *fmt, ...);
size_t spec_path_push_field(struct walk *w, const char *name);
size_t spec_path_push_index(struct walk *w, int index);
void spec_path_pop(struct walk *w, size_t old);
/* The kind at the top, else the path: for "unknown field ... in X". */
const char *spec_section_name(const struct walk *w);

/* --- walk.c: typing ------------------------------------------------------ */

/* s is non-empty and made of characters in accept only. */
bool spec_all_digits(const char *s, const char *accept);
/* Decimal integer; false on syntax or overflow. */
bool spec_parse_int64(const char *s, int64_t *out);

enum milli_result { MILLI_OK, MILLI_SYNTAX, MILLI_TOO_FINE, MILLI_TOO_BIG };

/* Decimal text ("2", "0.5", ".25") in thousandths, at most max_milli. */
enum milli_result spec_parse_milli(const char *s, int64_t max_milli,
				   int64_t *out);

/* Type a node; refuses aliases, tags, NUL bytes and invalid UTF-8. */
int spec_classify(struct walk *w, struct fy_node *node, struct value *v);
/* The "got ..." part of a message, in buf or a constant. */
const char *spec_describe(const struct value *v, char *buf, size_t size);
/*
 * A number counted in thousandths (0.5 GPUs, 2 CPUs, 0.25 seconds), at
 * most max_milli, classified into *v: 0 with *milli set; 1 when node is
 * no such number (the caller takes another form or says what it wants);
 * an error when node cannot be read or, where counted says what ("CPUs
 * are"), when the number is finer than a thousandth.
 */
int spec_read_thousandths(struct walk *w, struct fy_node *node,
			  int64_t max_milli, const char *counted,
			  struct value *v, int64_t *milli);
/* A value where text is wanted: strings, and numbers as written. */
int spec_want_text(struct walk *w, struct fy_node *node, bool allow_bool,
		   const char *allowed, struct value *v);
int spec_want_nonempty_text(struct walk *w, struct fy_node *node,
			    const char *allowed, struct value *v);
/* A list of min to max items (max < 0: no bound): 0 with *count set, or
   "must be ALLOWED; got ..." naming what node is. */
int spec_want_list(struct walk *w, struct fy_node *node, int min, int max,
		   const char *allowed, size_t *count);

/* --- walk.c: field tables ------------------------------------------------ */

int spec_read_int_field(struct walk *w, const struct field *f,
			struct fy_node *node, void *target);
int spec_read_bool_field(struct walk *w, const struct field *f,
			 struct fy_node *node, void *target);
/*
 * Read a mapping through a field table into target. seen (n_fields
 * entries, may be NULL) receives each field's pair, NULL when absent.
 */
int spec_walk_mapping(struct walk *w, struct fy_node *node,
		      const struct field *fields, size_t n_fields,
		      void *target, struct fy_node_pair **seen);
/* Read a mapping key as a name. */
int spec_read_key(struct walk *w, struct fy_node *key, struct value *v);
/* A mapping of names to text (numbers and booleans become their text). */
int spec_read_string_map(struct walk *w, struct fy_node *node,
			 const char *what, key_problem_fn key_problem,
			 struct kn_kv **out, size_t *n_out);
/*
 * A non-empty list of text into a NULL-terminated array. Items must not be
 * empty, except after the first when rest_may_be_empty (argv).
 */
int spec_read_text_list(struct walk *w, struct fy_node *node,
			const char *allowed, bool rest_may_be_empty,
			char ***out, size_t *n_out);
/* Reads item i of a list into what ctx holds. */
typedef int (*spec_item_fn)(struct walk *w, struct fy_node *item, size_t i,
			    void *ctx);
/* The first count items of a list through read_item, "[i]" on the path. */
int spec_walk_items(struct walk *w, struct fy_node *node, size_t count,
		    spec_item_fn read_item, void *ctx);
/* Read text that must be one of choices (a NULL-terminated list). */
int spec_read_choice(struct walk *w, struct fy_node *node,
		     const char *const *choices, const char *allowed,
		     const char **out);

/* --- walk.c: fields every kind has --------------------------------------- */

/* node is the text kind ("Job", "Deployment"). */
int spec_check_kind(struct walk *w, struct fy_node *node, const char *kind);
int spec_read_api_version(struct walk *w, struct fy_node *node, void *target);
bool spec_valid_name(const char *s);
/* A name (spec_valid_name) into *out; allowed: what the message says a
   name must be, NULL for the rule itself. */
int spec_read_name_into(struct walk *w, struct fy_node *node,
			const char *allowed, char **out);
/* The job's name: target is a struct kn_job_spec. */
int spec_read_name(struct walk *w, struct fy_node *node, void *target);

/*
 * The root of a document of this kind: a mapping, kind: first, then its
 * fields through the kind's table (seen as for spec_walk_mapping).
 */
int spec_read_root(struct walk *w, struct fy_node *root,
		   const struct spec_kind *kind, void *target,
		   struct fy_node_pair **seen);

/*
 * Check the text, load its one YAML document and hand the root to read.
 * Errors (too big, not UTF-8, bad YAML, two documents, empty) carry
 * file:line:column; what is wrong inside the mapping is read's to say.
 * empty_hint completes "spec is empty; expected ..."; NULL: an empty
 * document is allowed and read gets a NULL root.
 */
int spec_parse_document(const char *text, size_t len, const char *filename,
			const char *empty_hint, spec_read_root_fn read,
			void *obj, struct kn_error *err);

/* --- job.c: the job's fields, shared with the kinds that hold a job ------ */

/* The job's field tables by path, for "did you mean". */
const struct section *spec_job_sections(size_t *n);

/*
 * The entries of fields a deployment takes as the job takes them, for
 * both tables: offsets into struct kn_job_spec, which a deployment
 * begins with. apiVersion reads the same in every kind.
 */
#define SPEC_FIELD_API_VERSION                                              \
	{.name = "apiVersion", .type = FT_CUSTOM,                           \
	 .read = spec_read_api_version}
#define SPEC_FIELD_JOB_NAME                                                 \
	{.name = "name", .type = FT_CUSTOM, .read = spec_read_name,         \
	 .required = true}
#define SPEC_FIELD_COMMAND                                                  \
	{.name = "command", .type = FT_CUSTOM, .read = spec_read_command,   \
	 .required = true}
#define SPEC_FIELD_ENV {.name = "env", .type = FT_CUSTOM, .read = spec_read_env}
#define SPEC_FIELD_WORKDIR                                                  \
	{.name = "workdir", .type = FT_TEXT,                                \
	 .offset = offsetof(struct kn_job_spec, workdir)}
#define SPEC_FIELD_RESOURCES                                                \
	{.name = "resources", .type = FT_CUSTOM, .read = spec_read_resources}
#define SPEC_FIELD_PLACEMENT                                                \
	{.name = "placement", .type = FT_CUSTOM, .read = spec_read_placement}
#define SPEC_FIELD_PRIORITY                                                 \
	{.name = "priority", .type = FT_INT,                                \
	 .offset = offsetof(struct kn_job_spec, priority), .min = 0,        \
	 .max = KN_SPEC_MAX_PRIORITY}
void spec_job_defaults(struct kn_job_spec *spec);
/* backoff at most backoff_max; the pairs are where they were given. */
int spec_check_backoff(struct walk *w, const struct kn_job_spec *spec,
		       struct fy_node_pair *backoff,
		       struct fy_node_pair *backoff_max);
/*
 * A job given by its file (relative to the owner's file, read by the
 * client) or inline, where kind and name may be left out. inputs_reader,
 * when set, replaces how an inline job's inputs: is read.
 */
int spec_read_job_or_file(struct walk *w, struct fy_node *node,
			  const char *owner, field_read_fn inputs_reader,
			  char **job_file, struct kn_job_spec **job);
/* Job field readers: target is the struct kn_job_spec. */
int spec_read_command(struct walk *w, struct fy_node *node, void *target);
int spec_read_env(struct walk *w, struct fy_node *node, void *target);
int spec_read_resources(struct walk *w, struct fy_node *node, void *target);
int spec_read_placement(struct walk *w, struct fy_node *node, void *target);
/* target is a struct kn_placement_spec. */
int spec_read_spread(struct walk *w, struct fy_node *node, void *target);
/* A size such as 2Gi: target is a struct kn_resources (memory_bytes). */
int spec_read_memory(struct walk *w, struct fy_node *node, void *target);
void spec_free_strv(char **v, size_t n);

/* Affinity operators by enum kn_affinity_op, NULL-terminated. */
extern const char *const spec_affinity_ops[];

/* --- dev_environment.c -------------------------------------------------- */
/* Whether a document's root says kind: DevEnvironment. */
bool spec_root_is_devenv(struct fy_node *root);
/* A DevEnvironment's root into spec (defaults first, devenv.set). */
int spec_read_devenv_root(struct walk *w, struct fy_node *root,
			  struct kn_job_spec *spec);

/* --- array.c ------------------------------------------------------------ */
/* `array:`: target is the struct kn_job_spec. */
int spec_read_array(struct walk *w, struct fy_node *node, void *target);
/* The mapping form's fields, for "did you mean". */
#define SPEC_ARRAY_FIELDS 2
extern const struct field spec_array_fields[SPEC_ARRAY_FIELDS];

/* --- job_json.c ---------------------------------------------------------- */

json_t *spec_json_string_or_null(const char *s);
json_t *spec_strv_json(char *const *v, size_t n);

#endif
