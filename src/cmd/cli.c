/*
 * cli: the flag parser, messages, formatting and the table printer every
 * subcommand uses.
 *
 * Flags are tables (struct cli_flag) rather than getopt_long loops in each
 * command: one parser then gives every command the same spellings
 * (`--x V`, `--x=V`, `-fV`), global flags anywhere on the line, `--help`,
 * and the same messages, including "did you mean" for typos. Global flags
 * after the subcommand's name are recognised here, not stripped by main(),
 * so a flag value that happens to look like a global flag stays a value.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kube/kube.h"
#include "spec/spec.h"

static bool is_flag(const char *arg)
{
	return arg[0] == '-' && arg[1] != '\0';
}

static void vmessage(const struct cli_ctx *ctx, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", ctx->prog[0] ? ctx->prog : "kiln");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int cli_usage_error(const struct cli_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(ctx, fmt, ap);
	va_end(ap);
	return CLI_EXIT_USAGE;
}

int cli_fail(const struct cli_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(ctx, fmt, ap);
	va_end(ap);
	return CLI_EXIT_FAIL;
}

const char *cli_closest(const char *word, const char *const *names)
{
	const char *best = NULL;
	int best_d = INT_MAX;
	size_t i;

	for (i = 0; names[i]; i++) {
		int d = kn_levenshtein(word, names[i]);
		if (d < best_d) {
			best_d = d;
			best = names[i];
		}
	}
	/* Two edits catch most typos; short words need a closer match. */
	if (!best || best_d > 2 || (size_t)best_d >= strlen(word))
		return NULL;
	return best;
}

int cli_check_choice(const struct cli_ctx *ctx, const char *what,
		     const char *plural, const char *word,
		     const char *const *names)
{
	char all[256] = "";
	const char *near;
	size_t i, used = 0;

	for (i = 0; names[i]; i++)
		if (!strcmp(word, names[i]))
			return CLI_GO;
	near = cli_closest(word, names);
	if (near)
		return cli_usage_error(ctx, "no %s '%s'; did you mean '%s'?",
				       what, word, near);
	for (i = 0; names[i] && used < sizeof(all); i++)
		used += (size_t)snprintf(all + used, sizeof(all) - used, "%s%s",
					 !i ? "" : names[i + 1] ? ", " : " and ",
					 names[i]);
	return cli_usage_error(ctx, "no %s '%s'; %s are %s", what, word,
			       plural, all);
}

int cli_split_list(const struct cli_ctx *ctx, const char *flag,
		   const char *arg, bool paths, char **buf, const char **items,
		   size_t max)
{
	char *rest, *item;
	size_t n = 0;

	*buf = kn_xstrdup(arg);
	rest = *buf;
	while ((item = strsep(&rest, ",")) != NULL) {
		if (!*item || (paths && *item != '/') || n + 1 >= max)
			return cli_usage_error(ctx, "--%s: \"%s\": entries must be "
						    "%s, at most %zu of them",
					       flag, item,
					       paths ? "absolute paths"
						     : "non-empty",
					       max - 1);
		items[n++] = item;
	}
	items[n] = NULL;
	return CLI_GO;
}

#define N_GLOBAL_FLAGS 4

static void global_flags(struct cli_ctx *ctx,
			 struct cli_flag out[N_GLOBAL_FLAGS + 1])
{
	out[0] = (struct cli_flag){"server", 0, CLI_FLAG_STRING, &ctx->server};
	out[1] = (struct cli_flag){"token", 0, CLI_FLAG_STRING, &ctx->token};
	out[2] = (struct cli_flag){"output", 'o', CLI_FLAG_STRING,
				   &ctx->output};
	out[3] = (struct cli_flag){"no-headers", 0, CLI_FLAG_BOOL,
				   &ctx->no_headers};
	out[4] = (struct cli_flag){NULL, 0, CLI_FLAG_BOOL, NULL};
}

static const struct cli_flag *find_flag(const struct cli_flag *flags,
					const char *name, size_t name_len,
					char short_name)
{
	for (; flags && flags->name; flags++) {
		if (short_name ? flags->short_name == short_name
			       : strlen(flags->name) == name_len &&
					 !strncmp(flags->name, name, name_len))
			return flags;
	}
	return NULL;
}

static int unknown_flag(struct cli_ctx *ctx, const struct cli_flag *flags,
			const struct cli_flag *globals, const char *arg)
{
	const char *names[64];
	char word[64];
	const char *eq, *near;
	size_t n = 0;

	for (; flags && flags->name && n < 30; flags++)
		names[n++] = flags->name;
	for (; globals->name; globals++)
		names[n++] = globals->name;
	names[n++] = "help";
	names[n] = NULL;
	/* Compare the name alone: "--sate=x" is a typo of "state". */
	kn_strlcpy(word, arg + strspn(arg, "-"), sizeof(word));
	eq = strchr(word, '=');
	if (eq)
		word[eq - word] = '\0';
	near = arg[1] == '-' ? cli_closest(word, names) : NULL;
	if (near)
		return cli_usage_error(ctx,
				       "unknown flag %s; did you mean --%s?",
				       arg, near);
	return cli_usage_error(ctx, "unknown flag %s; see '%s --help'", arg,
			       ctx->cmd ? ctx->prog : "kiln");
}

static int parse_count(struct cli_ctx *ctx, const char *flag,
		       const char *value, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (value[0] < '0' || value[0] > '9' || *end || errno || v > INT_MAX)
		return cli_usage_error(ctx,
				       "--%s wants a whole number, got '%s'",
				       flag, value);
	*out = (int)v;
	return CLI_GO;
}

/* The flag that arg ("--name", "--name=V", "-x", "-xV") names, from
   flags, else from globals, or NULL; *value is the value arg itself
   carries, or NULL. */
static const struct cli_flag *flag_named(const struct cli_flag *flags,
					 const struct cli_flag *globals,
					 const char *arg, const char **value)
{
	const struct cli_flag *f;

	*value = NULL;
	if (arg[1] == '-') {
		const char *name = arg + 2;
		const char *eq = strchr(name, '=');
		size_t name_len = eq ? (size_t)(eq - name) : strlen(name);

		f = find_flag(flags, name, name_len, 0);
		if (!f)
			f = find_flag(globals, name, name_len, 0);
		if (eq)
			*value = eq + 1;
		return f;
	}
	f = find_flag(flags, NULL, 0, arg[1]);
	if (!f)
		f = find_flag(globals, NULL, 0, arg[1]);
	if (f && arg[2])
		*value = arg + 2;
	return f;
}

int cli_take_flag(struct cli_ctx *ctx, const struct cli_flag *flags,
		  int argc, char **argv, int *i)
{
	struct cli_flag globals[N_GLOBAL_FLAGS + 1];
	const struct cli_flag *f;
	const char *arg = argv[*i];
	const char *value;

	global_flags(ctx, globals);
	f = flag_named(flags, globals, arg, &value);
	if (!f)
		return unknown_flag(ctx, flags, globals, arg);
	if (f->type == CLI_FLAG_BOOL) {
		if (value)
			return cli_usage_error(ctx, "--%s takes no value",
					       f->name);
		*(bool *)f->dest = true;
		return CLI_GO;
	}
	if (!value) {
		if (*i + 1 >= argc)
			return cli_usage_error(ctx, "--%s needs a value",
					       f->name);
		value = argv[++*i];
	}
	if (f->type == CLI_FLAG_COUNT)
		return parse_count(ctx, f->name, value, f->dest);
	if (f->type == CLI_FLAG_LIST) {
		struct cli_list *list = f->dest;

		list->v = kn_xrealloc(list->v, (list->n + 1) * sizeof(char *));
		list->v[list->n++] = value;
		return CLI_GO;
	}
	*(const char **)f->dest = value;
	return CLI_GO;
}

int cli_check_output(struct cli_ctx *ctx)
{
	static const char *const always[] = {"table", "wide", "json", "yaml",
					     NULL};

	if (!ctx->output)
		ctx->output = "table";
	if ((ctx->csv_ok && !strcmp(ctx->output, "csv")) ||
	    (ctx->name_ok && !strcmp(ctx->output, "name")))
		return CLI_GO;
	for (size_t i = 0; always[i]; i++)
		if (!strcmp(ctx->output, always[i]))
			return CLI_GO;
	return cli_usage_error(ctx, "-o wants table, wide, json, yaml%s%s, "
				    "got '%s'",
			       ctx->csv_ok ? ", csv" : "",
			       ctx->name_ok ? ", name" : "", ctx->output);
}

bool cli_want_json(const struct cli_ctx *ctx)
{
	return ctx->output && (!strcmp(ctx->output, "json") ||
			       !strcmp(ctx->output, "yaml"));
}

bool cli_want_name(const struct cli_ctx *ctx)
{
	return ctx->output && !strcmp(ctx->output, "name");
}

bool cli_want_wide(const struct cli_ctx *ctx)
{
	return ctx->output && !strcmp(ctx->output, "wide");
}

int cli_parse_positionals(struct cli_ctx *ctx, int argc, char **argv,
			  const struct cli_flag *flags, const char **pos,
			  size_t max_pos, size_t *n_pos)
{
	bool flags_done = false;

	*n_pos = 0;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int rc;

		if (flags_done || !is_flag(arg)) {
			if (*n_pos == max_pos)
				return cli_usage_error(
					ctx, "unexpected argument '%s'", arg);
			pos[(*n_pos)++] = arg;
			continue;
		}
		if (!strcmp(arg, "--")) {
			flags_done = true;
			continue;
		}
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			fputs(ctx->cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		rc = cli_take_flag(ctx, flags, argc, argv, &i);
		if (rc != CLI_GO)
			return rc;
	}
	return cli_check_output(ctx);
}

int cli_parse(struct cli_ctx *ctx, int argc, char **argv,
	      const struct cli_flag *flags, const char *pos_name,
	      const char **pos)
{
	size_t n_pos;
	int rc = cli_parse_positionals(ctx, argc, argv, flags, pos,
				       pos_name ? 1 : 0, &n_pos);

	if (rc == CLI_GO && pos_name && !n_pos)
		return cli_usage_error(ctx, "missing %s; see '%s --help'",
				       pos_name, ctx->prog);
	return rc;
}

int cli_parse_when(const char *text, int64_t now_ms, int64_t *out_ms)
{
	static const char *const formats[] = {
		"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d",
	};
	int64_t ago;

	if (!text || !*text)
		return -EINVAL;
	if (kn_parse_duration(text, &ago) == 0) {
		*out_ms = now_ms - ago;
		return 0;
	}
	for (size_t i = 0; i < KN_LEN(formats); i++) {
		int64_t ms;
		const char *end = kn_parse_time(text, formats[i], &ms);

		if (end && (!*end || !strcmp(end, "Z"))) {
			*out_ms = ms;
			return 0;
		}
	}
	return -EINVAL;
}

int cli_parse_job_id(const struct cli_ctx *ctx, const char *arg,
		     int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end || errno || v < 1)
		return cli_usage_error(
			ctx, "a job ID is a number such as 7, got '%s'", arg);
	*out = v;
	return CLI_GO;
}

void cli_format_array_counts(json_t *counts, char *buf, size_t len)
{
	static const char *const order[] = {
		"running", "queued",    "preempted",
		"failed",  "cancelled", "succeeded",
	};
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(order) / sizeof(*order); i++) {
		json_int_t n = json_integer_value(json_object_get(counts,
								  order[i]));
		int w;

		if (n <= 0 || at >= len)
			continue;
		w = snprintf(buf + at, len - at, "%s%lld %s", at ? ", " : "",
			     (long long)n, order[i]);
		at += w > 0 ? (size_t)w : 0;
	}
}

int cli_parse_job_ref(const struct cli_ctx *ctx, const char *arg,
		      int64_t *id, int64_t *index)
{
	const char *open = strchr(arg, '[');
	char head[24], *end;
	long long k;
	int rc;

	*index = -1;
	if (!open)
		return cli_parse_job_id(ctx, arg, id);
	errno = 0;
	k = strtoll(open + 1, &end, 10);
	if (open[1] < '0' || open[1] > '9' || errno || k > INT32_MAX ||
	    strcmp(end, "]") != 0)
		return cli_usage_error(ctx,
				       "an array element is ID[INDEX] such as "
				       "7[3], got '%s'", arg);
	if ((size_t)(open - arg) >= sizeof(head))
		return cli_parse_job_id(ctx, arg, id); /* says what is wrong */
	memcpy(head, arg, (size_t)(open - arg));
	head[open - arg] = '\0';
	rc = cli_parse_job_id(ctx, head, id);
	if (rc == CLI_GO)
		*index = k;
	return rc;
}

static int read_stdin(size_t max, char **text, size_t *len)
{
	struct kn_buf b;
	char chunk[65536];

	kn_buf_init(&b, max);
	for (;;) {
		size_t n = fread(chunk, 1, sizeof(chunk), stdin);
		if (n > 0 && kn_buf_append(&b, chunk, n) < 0) {
			kn_buf_release(&b);
			return -EFBIG;
		}
		if (n < sizeof(chunk))
			break;
	}
	if (ferror(stdin)) {
		kn_buf_release(&b);
		return -EIO;
	}
	*text = b.data ? b.data : kn_xstrdup("");
	*len = b.len;
	return 0;
}

int cli_read_spec(const struct cli_ctx *ctx, const char *path, char **text,
		  size_t *len, const char **name)
{
	bool from_stdin = !strcmp(path, "-");
	int rc;

	*name = from_stdin ? "<stdin>" : path;
	rc = from_stdin ? read_stdin(KN_SPEC_MAX_BYTES, text, len)
			: kn_read_file(path, KN_SPEC_MAX_BYTES, text, len);
	if (rc == -EFBIG)
		return cli_fail(ctx,
				"%s is larger than %d KiB, the limit for a job "
				"spec",
				*name, KN_SPEC_MAX_BYTES / 1024);
	if (rc < 0)
		return cli_fail(ctx, "cannot read %s: %s", *name,
				strerror(-rc));
	return CLI_GO;
}

int cli_parse_spec(struct cli_ctx *ctx, int argc, char **argv,
		   const struct cli_flag *flags, const char **file,
		   char **text, size_t *len, const char **name)
{
	int rc = cli_parse(ctx, argc, argv, flags, "FILE", file);

	return rc == CLI_GO ? cli_read_spec(ctx, *file, text, len, name) : rc;
}

void cli_print_json(json_t *value)
{
	json_dumpf(value, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

void cli_print_data(const struct cli_ctx *ctx, json_t *value)
{
	json_t *docs;
	char *text;

	if (!ctx->output || strcmp(ctx->output, "yaml")) {
		cli_print_json(value);
		return;
	}
	docs = json_pack("[O]", value);
	text = kn_kube_yaml(docs);
	fputs(text, stdout);
	free(text);
	json_decref(docs);
}

void cli_clean(char *dst, const char *src, size_t size)
{
	kn_text_escape(dst, size, src, strlen(src), 0);
}

/* Characters in UTF-8 text: every byte that does not continue one. */
static size_t text_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

/* Where the character at index chars starts (or the NUL, for fewer). */
static size_t char_offset(const char *s, size_t chars)
{
	size_t n = 0;
	const char *p;

	for (p = s; *p; p++) {
		if (((unsigned char)*p & 0xc0) == 0x80)
			continue;
		if (n == chars)
			break;
		n++;
	}
	return (size_t)(p - s);
}

void cli_format_when(int64_t ms, int64_t now_ms, char *buf, size_t len)
{
	char abs[40], rel[32];

	if (ms <= 0) {
		snprintf(buf, len, "-");
		return;
	}
	kn_format_time(ms, abs, sizeof(abs));
	kn_format_ago(ms, now_ms, rel, sizeof(rel));
	snprintf(buf, len, "%s (%s)", abs, rel);
}

void cli_format_milli(int64_t milli, char *buf, size_t len)
{
	char frac[8];
	int n;

	if (milli < 0)
		milli = 0;
	snprintf(frac, sizeof(frac), "%03d", (int)(milli % 1000));
	/* Keep one decimal so a whole GPU still reads as an amount: "1.0". */
	for (n = 3; n > 1 && frac[n - 1] == '0'; n--)
		frac[n - 1] = '\0';
	snprintf(buf, len, "%lld.%s", (long long)(milli / 1000), frac);
}

/* Nearest integer, without pulling in libm for llround. */
static int64_t round_half_away(double v)
{
	return (int64_t)(v >= 0 ? v + 0.5 : v - 0.5);
}

void cli_format_gpus(json_t *gpus, char *buf, size_t len)
{
	if (json_is_string(gpus)) {
		cli_clean(buf, json_string_value(gpus), len);
	} else if (json_is_integer(gpus)) {
		snprintf(buf, len, "%lld", (long long)json_integer_value(gpus));
	} else if (json_is_real(gpus)) {
		int64_t milli = round_half_away(json_real_value(gpus) * 1000);
		if (milli % 1000 == 0)
			snprintf(buf, len, "%lld", (long long)(milli / 1000));
		else
			cli_format_milli(milli, buf, len);
	} else {
		snprintf(buf, len, "0");
	}
}

void cli_format_ran(int64_t started_ms, int64_t ended_ms, int64_t now_ms,
		    char *buf, size_t len)
{
	if (started_ms <= 0) {
		snprintf(buf, len, "-");
		return;
	}
	kn_format_duration((ended_ms > 0 ? ended_ms : now_ms) - started_ms, buf,
			   len);
}

const char *cli_json_str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

int64_t cli_json_int(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	if (json_is_real(v))
		return round_half_away(json_real_value(v));
	return json_integer_value(v);
}

struct cli_table {
	size_t n_cols;
	bool *cuttable; /* per column */
	char **cells; /* row-major, the header row first */
	size_t n_cells;
	size_t alloc;
};

struct cli_table *cli_table_new(const char *const *headers)
{
	struct cli_table *t = kn_xcalloc(1, sizeof(*t));

	while (headers[t->n_cols])
		t->n_cols++;
	t->cuttable = kn_xcalloc(t->n_cols, sizeof(bool));
	for (size_t i = 0; i < t->n_cols; i++)
		cli_table_cell(t, headers[i]);
	return t;
}

void cli_table_free(struct cli_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_cells; i++)
		free(t->cells[i]);
	KN_FREE_ALL(t->cells, t->cuttable, t);
}

void cli_table_cell(struct cli_table *t, const char *text)
{
	/* Room for every byte's escape: a cell is never cut. */
	size_t size = 4 * strlen(text) + 1;
	char *copy = kn_xmalloc(size);

	cli_clean(copy, text, size);
	if (t->n_cells == t->alloc) {
		t->alloc = t->alloc ? t->alloc * 2 : 64;
		t->cells = kn_xrealloc(t->cells, t->alloc * sizeof(char *));
	}
	t->cells[t->n_cells++] = copy;
}

void cli_table_cellf(struct cli_table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	cli_table_cell(t, s ? s : "");
	free(s);
}

void cli_table_int(struct cli_table *t, json_t *obj, const char *key)
{
	cli_table_cellf(t, "%lld", (long long)cli_json_int(obj, key));
}

void cli_table_list(struct cli_table *t, json_t *obj, const char *key,
		    const char *empty)
{
	struct kn_buf list;
	json_t *item;
	size_t i;

	kn_buf_init(&list, SIZE_MAX);
	json_array_foreach(json_object_get(obj, key), i, item)
		kn_buf_printf(&list, "%s%s", i ? "," : "",
			      json_string_value(item));
	cli_table_cell(t, list.len ? list.data : empty);
	kn_buf_release(&list);
}

void cli_table_ago(struct cli_table *t, json_t *obj, const char *key,
		   int64_t now_ms)
{
	char ago[32];

	kn_format_ago(cli_json_int(obj, key), now_ms, ago, sizeof(ago));
	cli_table_cell(t, ago);
}

static size_t *column_widths(const struct cli_table *t)
{
	size_t *width = kn_xcalloc(t->n_cols, sizeof(size_t));

	for (size_t i = 0; i < t->n_cells; i++) {
		size_t w = text_width(t->cells[i]);
		if (w > width[i % t->n_cols])
			width[i % t->n_cols] = w;
	}
	return width;
}

/* Rows from first_row on (0 is the header row). */
static void print_rows(const struct cli_table *t, FILE *f, int indent,
		       size_t first_row)
{
	size_t *width = column_widths(t);
	size_t r, c, n_rows = (t->n_cells + t->n_cols - 1) / t->n_cols;

	for (r = first_row; r < n_rows; r++) {
		char **row = t->cells + r * t->n_cols;
		size_t last = 0, n = t->n_cols;

		/* A row still being filled has fewer cells. */
		if ((r + 1) * t->n_cols > t->n_cells)
			n = t->n_cells - r * t->n_cols;
		for (c = 0; c < n; c++)
			if (row[c][0])
				last = c;
		fprintf(f, "%*s", indent, "");
		for (c = 0; c <= last && c < n; c++) {
			fputs(row[c], f);
			if (c < last)
				fprintf(f, "%*s",
					(int)(width[c] - text_width(row[c]) + 2),
					"");
		}
		fputc('\n', f);
	}
	free(width);
}

void cli_table_print(const struct cli_table *t, FILE *f, int indent)
{
	print_rows(t, f, indent, 0);
}

void cli_table_cuttable(struct cli_table *t, size_t col)
{
	if (col < t->n_cols)
		t->cuttable[col] = true;
}

/* A cut column keeps at least its header and this many characters. */
#define CUT_MIN_CHARS 8

/*
 * Narrow the widest cuttable column, one character at a time, until the
 * rows fit in max characters or none can narrow; then cut its cells.
 */
static void table_fit(struct cli_table *t, size_t max)
{
	size_t *width = column_widths(t);
	size_t total = 2 * (t->n_cols - 1), c, i;

	for (c = 0; c < t->n_cols; c++)
		total += width[c];
	while (total > max) {
		size_t widest = t->n_cols;

		for (c = 0; c < t->n_cols; c++) {
			size_t floor = text_width(t->cells[c]);

			if (floor < CUT_MIN_CHARS)
				floor = CUT_MIN_CHARS;
			if (t->cuttable[c] && width[c] > floor &&
			    (widest == t->n_cols || width[c] > width[widest]))
				widest = c;
		}
		if (widest == t->n_cols)
			break;
		width[widest]--;
		total--;
	}
	for (i = t->n_cols; i < t->n_cells; i++) {
		char *cell = t->cells[i];

		c = i % t->n_cols;
		if (!t->cuttable[c] || text_width(cell) <= width[c])
			continue;
		t->cells[i] = kn_asprintf("%.*s\u2026",
					  (int)char_offset(cell, width[c] - 1),
					  cell);
		free(cell);
	}
	free(width);
}

void cli_table_show(const struct cli_ctx *ctx, struct cli_table *t, FILE *f,
		    int indent)
{
	if (!cli_want_wide(ctx))
		table_fit(t, CLI_TABLE_WIDTH - (size_t)indent);
	print_rows(t, f, indent, ctx->no_headers ? 1 : 0);
}

/* The index of the first argument past the global flags and their
   values (argc when none is): nothing is set. */
static int past_global_flags(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_flag globals[N_GLOBAL_FLAGS + 1];
	int i = 1;

	global_flags(ctx, globals);
	while (i < argc && argv[i][0] == '-' && argv[i][1]) {
		const char *value;
		const struct cli_flag *f = flag_named(NULL, globals, argv[i],
						      &value);

		if (!f)
			break;
		i += f->type == CLI_FLAG_BOOL || value ? 1 : 2;
	}
	return i;
}

int cli_run_verb_or(struct cli_ctx *ctx, int argc, char **argv,
		    const struct cli_verb *verbs, cli_runner *otherwise)
{
	int i = past_global_flags(ctx, argc, argv);

	for (size_t v = 0; i < argc && verbs[v].name; v++)
		if (!strcmp(argv[i], verbs[v].name))
			return cli_run_verb(ctx, argc, argv, verbs);
	return otherwise(ctx, argc, argv);
}

int cli_run_verb(struct cli_ctx *ctx, int argc, char **argv,
		 const struct cli_verb *verbs)
{
	const char *names[16], *near;
	char choices[256] = "";
	size_t n = 0;
	int i;

	for (; verbs[n].name && n < 15; n++) {
		names[n] = verbs[n].name;
		snprintf(choices + strlen(choices),
			 sizeof(choices) - strlen(choices), "%s%s",
			 n == 0 ? "" : verbs[n + 1].name ? ", " : " or ",
			 verbs[n].name);
	}
	names[n] = NULL;
	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		int rc;

		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(ctx->cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		rc = cli_take_flag(ctx, NULL, argc, argv, &i);
		if (rc != CLI_GO)
			return rc;
	}
	if (i == argc)
		return cli_usage_error(ctx, "missing what to do: %s", choices);
	for (size_t v = 0; v < n; v++) {
		size_t used = strnlen(ctx->prog, sizeof(ctx->prog));

		if (strcmp(argv[i], verbs[v].name))
			continue;
		snprintf(ctx->prog + used, sizeof(ctx->prog) - used, " %s",
			 verbs[v].name);
		return verbs[v].run(ctx, argc - i, argv + i);
	}
	near = cli_closest(argv[i], names);
	if (near)
		return cli_usage_error(ctx, "no '%s'; did you mean '%s'?",
				       argv[i], near);
	return cli_usage_error(ctx, "no '%s'; choose %s", argv[i], choices);
}
