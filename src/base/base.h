/*
 * base: the few things every kiln module needs — errors that carry their
 * message, logging, clocks, bounded strings, durations and sizes, files.
 *
 * Errors follow one convention everywhere: a function returns 0 on success
 * or a negative errno, and fills the caller's struct kn_error (passed last,
 * may be NULL) with a message naming the field or file. Out-parameters are
 * written only on success.
 */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#define KN_VERSION "0.1.0"

/* The number of elements of array a. Given a pointer instead, the
   compiler's -Wsizeof-pointer-div (in -Wall) refuses it. */
#define KN_LEN(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Unlink x from the singly linked list that *head starts and each
 * element's ->next goes on; nothing when x is not in it. Frees nothing.
 * head is read once; x is a plain name.
 */
#define KN_LIST_UNLINK(head, x)						\
	do {								\
		for (__typeof__(head) kn_link_ = (head); *kn_link_;	\
		     kn_link_ = &(*kn_link_)->next)			\
			if (*kn_link_ == (x)) {				\
				*kn_link_ = (x)->next;			\
				break;					\
			}						\
	} while (0)

/*
 * Unlink x from the doubly linked list that head (an lvalue) starts, whose
 * elements link through ->prev and ->next. Frees nothing; x's own links
 * are left as they were. x is a plain name.
 */
#define KN_DLIST_UNLINK(head, x)					\
	do {								\
		if ((x)->prev)						\
			(x)->prev->next = (x)->next;			\
		else							\
			(head) = (x)->next;				\
		if ((x)->next)						\
			(x)->next->prev = (x)->prev;			\
	} while (0)

/*
 * Free every element of the singly linked list head (an lvalue, left
 * NULL) with free_fn, first to last; each is off the list before its
 * free_fn runs.
 */
#define KN_LIST_FREE(head, free_fn)					\
	do {								\
		while (head) {						\
			__typeof__(head) kn_item_ = (head);		\
			(head) = kn_item_->next;			\
			free_fn(kn_item_);				\
		}							\
	} while (0)

/*
 * Release an array of n rows that each own one string, member: free each
 * row's member, then the array; items is left NULL and n 0. items and n
 * are lvalues, read more than once.
 */
#define KN_ROWS_RELEASE(items, n, member)				\
	do {								\
		for (size_t kn_row_ = 0; kn_row_ < (n); kn_row_++)	\
			free((items)[kn_row_].member);			\
		free(items);						\
		(items) = NULL;						\
		(n) = 0;						\
	} while (0)

/*
 * Free each pointer given, for destructors of structs that own several
 * allocations. Every argument is read before any is freed, so
 * KN_FREE_ALL(s->name, s) is safe.
 */
#define KN_FREE_ALL(...)						\
	kn_free_each((void *const[]){__VA_ARGS__},			\
		     KN_LEN(((void *const[]){__VA_ARGS__})))
void kn_free_each(void *const ptrs[], size_t n);

/* Error codes beyond errno, for the API's error.code strings. */
enum kn_errcode {
	KN_EOK = 0,
	KN_EINVAL,     /* bad input: 400 invalid_argument */
	KN_ENOTFOUND,  /* 404 not_found */
	KN_EAUTH,      /* 401 unauthenticated */
	KN_EPERM,      /* 403 permission_denied */
	KN_ECONFLICT,  /* 409 conflict */
	KN_ETOOBIG,    /* 413 too_large */
	KN_EIO,        /* 500 internal (I/O, database) */
	KN_EUNAVAIL,   /* 503 unavailable */
	KN_ELIMIT,     /* 429 limit_exceeded: a per-user or per-token cap */
	KN_ENOSPACE,   /* 507 insufficient_storage (a full disk) */
};

struct kn_error {
	enum kn_errcode code;
	char field[128];   /* field path such as "resources.gpus", or "" */
	char message[768]; /* human text, may start with "file:line:col: " */
};

/*
 * Fill err (if not NULL) and return the matching negative errno, so a
 * caller can write `return kn_errorf(err, KN_EINVAL, "tasks", "...")`.
 * field may be NULL.
 */
int kn_errorf(struct kn_error *err, enum kn_errcode code, const char *field,
	      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The API's string for a code ("invalid_argument", "not_found", ...). */
const char *kn_errcode_name(enum kn_errcode code);
/* The HTTP status for a code (400, 404, ...). */
int kn_errcode_http(enum kn_errcode code);
/* The negative errno kn_errorf returns for a code. */
int kn_errcode_errno(enum kn_errcode code);
/*
 * The code for a failed write's negative errno: KN_ENOSPACE when the disk
 * (or the user's quota) is full, so the API answers 507, else KN_EIO.
 */
enum kn_errcode kn_errcode_for_write(int neg_errno);

/*
 * Logging to stderr with a UTC timestamp; level filtered by kn_log_level.
 * The formatted message is escaped as kn_text_escape does (one record is
 * one line, whatever names it quotes), URLs lose their query
 * (kn_url_queries_cut), and it is cut at KN_LOG_LINE_MAX bytes, marked
 * " [cut]".
 */
#define KN_LOG_LINE_MAX 8192
enum kn_log_level { KN_LOG_DEBUG, KN_LOG_INFO, KN_LOG_WARN, KN_LOG_ERROR };
extern enum kn_log_level kn_log_level;
void kn_log(enum kn_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Store URLs are shown without their query, which may hold a credential
 * (an Azure SAS's sig=). kn_url_queries_cut: text with the query ('?' or
 * '#' to the URL's end) cut from every scheme:// URL in it; NULL when it
 * has none to cut, else a new string of *out_len bytes. Answers, event
 * streams and log lines pass through it. kn_url_base_len: the length of
 * url without its query or fragment, to build URLs below a store's.
 */
char *kn_url_queries_cut(const char *text, size_t len, size_t *out_len);
size_t kn_url_base_len(const char *url);

/* Clocks in milliseconds: wall time since the epoch, and monotonic. */
int64_t kn_now_ms(void);
int64_t kn_mono_ms(void);
/* The wall-clock moment ms from now, as pthread_cond_timedwait takes it. */
struct timespec kn_realtime_in(int64_t ms);
/* "2026-12-02T15:46:06.123Z" into buf (at least 32 bytes). */
void kn_format_time(int64_t epoch_ms, char *buf, size_t len);
/* The same in ISO 8601's basic form, "20261202T154606.123Z": a name
   that sorts by time and holds no ':' (at least 24 bytes). */
void kn_format_time_basic(int64_t epoch_ms, char *buf, size_t len);
/*
 * The time at the start of s, read with strptime's format as UTC, into
 * *out_ms (ms since the epoch): where the reading stopped, or NULL when
 * s does not start with that format (*out_ms untouched).
 */
const char *kn_parse_time(const char *s, const char *format,
			  int64_t *out_ms);
/* "3s ago", "5m ago", "2h ago", "4d ago", or "-" for 0; relative to now_ms. */
void kn_format_ago(int64_t epoch_ms, int64_t now_ms, char *buf, size_t len);
/* "850ms", "12s", "5m3s", "2h10m". */
void kn_format_duration(int64_t ms, char *buf, size_t len);

/*
 * Durations are at most ten years: any longer one is a mistake, and a
 * bound keeps now + duration (and a doubled back-off) far from overflow.
 */
#define KN_DURATION_MAX_MS (3650LL * 86400 * 1000)
/*
 * "90s", "5m", "1h30m", "250ms", "2d" -> milliseconds. A bare number is
 * rejected (units are required), and so is one over KN_DURATION_MAX_MS
 * ("3650d"). Returns 0 or -EINVAL.
 */
int kn_parse_duration(const char *s, int64_t *out_ms);
/*
 * "512Mi", "2Gi", "1G", "100M", "4096" (bytes) -> bytes. Binary suffixes
 * Ki Mi Gi Ti, decimal k M G T. Returns 0 or -EINVAL (also on overflow).
 */
int kn_parse_size(const char *s, int64_t *out_bytes);
/*
 * bytes as kn_parse_size reads it back, in the largest unit that divides
 * it exactly, binary before decimal: "64Mi", "16Gi", "1G", "1000".
 */
void kn_format_size(int64_t bytes, char *buf, size_t len);
/* bytes for a reader, to one decimal in binary units: "80.0 GiB",
   "512 B". */
void kn_format_bytes(int64_t bytes, char *buf, size_t len);

/* The value of key in env ("NAME=value" strings, NULL-terminated; NULL
   is empty), or NULL. */
const char *kn_env_get(char *const *env, const char *key);

/* The value of the HTTP header called name (any case) among n names and
   values, the first of a repeated one; NULL when absent. */
const char *kn_header_value(const char *const *names,
			    const char *const *values, size_t n,
			    const char *name);

/* Bounded string helpers. kn_strlcpy returns strlen(src). */
size_t kn_strlcpy(char *dst, const char *src, size_t size);
/* malloc'd printf; aborts on out-of-memory (as do all allocation helpers). */
char *kn_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *kn_xmalloc(size_t n);
void *kn_xcalloc(size_t n, size_t size);
void *kn_xrealloc(void *p, size_t n);
/* Array p, of *alloc elements of size with used of them taken, with room
   for one more: *alloc doubles (16 at first) when it is full. */
void *kn_xgrow(void *p, size_t *alloc, size_t used, size_t size);
char *kn_xstrdup(const char *s);
/* Frees a NULL-terminated vector of malloc'd strings and the vector; NULL
   is nothing. */
void kn_strv_free(char **v);
/* Frees the n malloc'd strings of v and v itself; NULL is nothing. */
void kn_strv_free_n(char **v, size_t n);
/* Edit distance, for "did you mean" suggestions. */
int kn_levenshtein(const char *a, const char *b);

/* A growable byte buffer with a hard cap; appends beyond cap fail. */
struct kn_buf {
	char *data; /* always NUL-terminated when non-NULL */
	size_t len;
	size_t cap_limit;
	size_t alloc;
};
void kn_buf_init(struct kn_buf *b, size_t cap_limit);
void kn_buf_release(struct kn_buf *b);
/* 0, or -E2BIG when the result would exceed cap_limit (buffer unchanged). */
int kn_buf_append(struct kn_buf *b, const void *data, size_t len);
int kn_buf_printf(struct kn_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * s percent-encoded for a URL: every byte but RFC 3986's unreserved
 * characters (and '/' when keep_slash) as %XX. 0, or -E2BIG when the cap
 * was reached (b then holds a cut copy, to be thrown away).
 */
int kn_buf_append_url_encoded(struct kn_buf *b, const char *s,
			      bool keep_slash);

/*
 * Start a program that outlives its caller's terminal: its own session,
 * no blocked or caught signals, stdin from /dev/null, stdout and stderr
 * to files (NULL: /dev/null; the same path: one file for both), nothing
 * else open. Output files are created 0600; with no_follow, not through
 * a symbolic link (the directory may be someone else's). search: look
 * path up in PATH. Returns 0 and the pid, or the errno of posix_spawn.
 */
struct kn_spawn {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *out_path;
	const char *err_path;
	bool append;    /* keep what the files hold */
	bool no_follow;
	bool search;
};
int kn_spawn_detached(const struct kn_spawn *sp, pid_t *pid);

/* Files. */
/* mkdir -p with mode for each created directory. */
int kn_mkdir_p(const char *path, mode_t mode);
/* Write via a temporary file, fsync, rename: readers see old or new. */
int kn_write_file_atomic(const char *path, const void *data, size_t len,
			 mode_t mode);
/*
 * The same without the fsync: for files that matter only while the
 * machine is up (a process's pid, its launch parameters), where an fsync
 * per task would cost more than it protects.
 */
int kn_write_file_replace(const char *path, const void *data, size_t len,
			  mode_t mode);
/*
 * The two above for text, a failure put in err as "cannot write PATH:
 * reason" (a full disk as KN_ENOSPACE, so that callers can wait for room).
 */
int kn_write_text_atomic(const char *path, const char *text, mode_t mode,
			 struct kn_error *err);
int kn_write_text_replace(const char *path, const char *text, mode_t mode,
			  struct kn_error *err);
/*
 * The whole of data out to fd, through short writes and EINTR: 0, or a
 * negative errno (-EIO when the descriptor takes nothing). kn_pwrite_all
 * writes at offset at and leaves the file offset alone; kn_send_all sends
 * with MSG_NOSIGNAL, so a closed peer is -EPIPE rather than SIGPIPE, and
 * a socket's SO_SNDTIMEO running out is -EAGAIN.
 */
int kn_write_all(int fd, const void *data, size_t len);
int kn_pwrite_all(int fd, const void *data, size_t len, int64_t at);
int kn_send_all(int fd, const void *data, size_t len);
/* pread(2) at offset at, again after EINTR: the bytes read (0 at the end
   of the file), or a negative errno. */
ssize_t kn_pread(int fd, void *buf, size_t len, int64_t at);
/*
 * Read a whole file of at most max bytes into a malloc'd NUL-terminated
 * buffer. -EFBIG when larger, -errno otherwise.
 */
int kn_read_file(const char *path, size_t max, char **out, size_t *out_len);
/* The same from an open descriptor, read to its end. */
int kn_read_fd(int fd, size_t max, char **out, size_t *out_len);
struct stat;
/* Whether fd's file still has before's size and modification and change
   times: any write since changes the change time, which no call sets
   back. */
bool kn_fd_unchanged(int fd, const struct stat *before);
/*
 * One process per state directory: an exclusive flock on dir/file (dir is
 * made 0700 if missing), held until the returned descriptor is closed or
 * the process exits (close-on-exec: children do not keep it). The file
 * says "PID HOLDER". Returns the fd, or -EBUSY with err saying "another
 * kiln HOLDER (pid N) holds LABEL (dir)" when another process holds it.
 */
#define KN_SERVER_LOCK "server.lock"
int kn_dir_lock(const char *dir, const char *file, const char *holder,
		const char *label, struct kn_error *err);
/*
 * Task files: anything under a directory a task can write (its task,
 * checkpoint and output directories) may be a symbolic link to a server
 * secret, a FIFO or a device. Open those only through these.
 *
 * kn_task_file_openat opens name, a relative path without "..", beneath
 * dirfd without following a symbolic link in any component and without
 * blocking, and only if it is a regular file (a directory when flags hold
 * O_DIRECTORY) owned by owner (KN_ANY_OWNER: any). Returns the descriptor
 * (O_CLOEXEC | O_NONBLOCK), or a negative errno with err saying why in
 * words, such as "output.log is a FIFO, not a regular file": -ENOENT when
 * missing, -EPERM when refused, -EINVAL for a bad name, -EIO otherwise.
 */
#define KN_ANY_OWNER ((uid_t)-1)
int kn_task_file_openat(int dirfd, const char *name, int flags, uid_t owner,
			struct kn_error *err);
/* The same beneath the trusted directory dir (itself followed). */
int kn_task_file_open(const char *dir, const char *name, int flags,
		      uid_t owner, struct kn_error *err);
/*
 * kn_read_file for a task file dir/name of any owner: -EFBIG when larger
 * than max, or the errors of kn_task_file_open.
 */
int kn_task_file_read(const char *dir, const char *name, size_t max,
		      char **out, size_t *out_len, struct kn_error *err);
/*
 * The field of a refusal (-EPERM): whether err says a task file was not
 * read for being a link, a FIFO, a device or another's.
 */
#define KN_TASK_FILE_REFUSED "task_file"
bool kn_task_file_refused(const struct kn_error *err);
/* "a regular file", "a FIFO", "a symbolic link", ... for messages. */
const char *kn_file_kind(mode_t mode);
/* Remove a directory tree; missing is not an error. */
int kn_rm_rf(const char *path);

/* Whether dir exists and holds anything besides . and .. */
bool kn_dir_has_entries(const char *dir);
/*
 * Read a config file of at most max bytes that only this user or root
 * may have written: a regular file, owned by the effective user or root,
 * without group or other write. -ENOENT when missing; else -EPERM or
 * -EINVAL with "PATH: mode 0664 lets others write it; a config file WHY:
 * chmod go-w PATH" (or the owner, or what it is instead of a file).
 */
int kn_config_file_read(const char *path, size_t max, const char *why,
			char **text, size_t *len, struct kn_error *err);
/* A SHA-256 digest in hex, without its NUL: blob and manifest digests,
   token hashes, and the longest git object id (SHA-256 repositories). */
#define KN_SHA256_HEX 64

/*
 * The git revision checked out in the repository holding dir (dir or a
 * parent has .git, a directory or a "gitdir:" file), read from HEAD, the
 * loose ref it names or packed-refs, into out (40 or 64 hex digits): 0,
 * or -ENOENT when dir is in no repository or HEAD names no commit yet.
 * Read directly, so a server needs neither git nor a child process.
 */
int kn_git_revision(const char *dir, char out[KN_SHA256_HEX + 1]);
/*
 * Make the calling thread yield to everything else: SCHED_IDLE CPU policy,
 * the lowest nice, idle I/O class. Threads it creates inherit this. For
 * work such as checkpoint uploads that must never slow the tasks down.
 * Best effort: returns 0, or -errno of the first step refused.
 */
int kn_thread_background(void);
/*
 * Run fn(arg) on n threads, the calling thread one of them, and return
 * when all have returned. For a pool whose workers take their items from
 * shared state: a thread that cannot be created leaves its share to the
 * others, so fewer threads only make the work slower.
 */
void kn_run_threads(int n, void *(*fn)(void *), void *arg);

/*
 * Where kiln's shipped data files are (GPU and VM catalogs, MIG profiles,
 * model presets, alert rules): $KILN_DATA_DIR when set; the source tree's
 * data/ for a binary inside its build tree; EXE/../share/kiln beside an
 * installed binary (a relocated prefix); else the data directory of the
 * prefix it was built for. Malloc'd; the caller frees.
 */
char *kn_data_dir(void);
/* kn_data_dir()/name, malloc'd. */
char *kn_data_path(const char *name);
/*
 * A helper program installed with kiln (name, e.g. "kiln-shim"): beside
 * the running binary's prefix, EXE/../LIBEXECDIR/kiln/name (a relocated
 * prefix too), or EXE's own directory (the build tree, where both are
 * built). Only a regular file owned by root or this user that no one
 * else may write is taken. Malloc'd path, or NULL when there is none.
 */
char *kn_libexec_path(const char *name);
/*
 * Tell the service manager (systemd's $NOTIFY_SOCKET) the state, e.g.
 * "READY=1" or "STOPPING=1". 0 when sent or when no manager listens;
 * a negative errno when the socket is refused.
 */
int kn_notify(const char *state);

/* YAML (libfyaml), for parsers that report file:line:column. */
struct fy_diag;
struct fy_node;
/*
 * The 1-based position of any node (mappings and sequences too), through
 * a report into diag, which must collect errors (fy_diag_cfg with
 * collect_errors set). false when libfyaml gives none.
 */
bool kn_yaml_node_position(struct fy_diag *diag, struct fy_node *node,
			   int *line, int *col);
/*
 * Where a scalar's text starts, 1-based (after an opening quote or '*'):
 * false when node is not a scalar or libfyaml kept no mark.
 */
bool kn_yaml_scalar_start(struct fy_node *node, int *line, int *col);
/*
 * A parser over text (len bytes, already passed by kn_yaml_text_check)
 * whose diagnostics are collected in *diag, never printed (libraries do
 * not print); flags are added to FYPCF_QUIET. Returns 0 with *diag and
 * *parser set, or -EIO ("FILE: cannot start the YAML parser") with both
 * NULL. The caller destroys the parser, then the diag.
 */
struct fy_parser;
int kn_yaml_parser_new(const char *text, size_t len, const char *file,
		       unsigned flags, struct fy_diag **diag,
		       struct fy_parser **parser, struct kn_error *err);
/*
 * Why libfyaml refused a document, from what diag (collecting errors)
 * holds: -EINVAL with "FILE:LINE:COLUMN: invalid YAML: WHY" from its
 * first error with a position, else "FILE: invalid YAML".
 */
int kn_yaml_parse_error(struct fy_diag *diag, const char *file,
			struct kn_error *err);
/*
 * Text that libfyaml may be given: no NUL byte and valid UTF-8 (Debian's
 * libfyaml 0.7.12 loops forever on some invalid UTF-8, e.g. "%m\xef" in
 * a directive). 0, or -EINVAL with "FILE:LINE:COLUMN: WHAT contains a
 * NUL byte" or "... WHAT is not valid UTF-8".
 */
int kn_yaml_text_check(const char *text, size_t len, const char *file,
		       const char *what, struct kn_error *err);
/*
 * Untrusted text (a name, a path, a task's output) rendered so that it
 * cannot act on where it is written: a log line, a terminal. Shown as
 * escapes: each C0 control character and DEL (\n, \r, \t, else \xHH),
 * each C1 control character U+0080..U+009F (\u00HH) and each byte that
 * is not part of valid UTF-8 (\xHH); a backslash is doubled, so the
 * rendering reads back to exactly the input. Everything else, valid UTF-8
 * included, is copied as it is.
 */
enum kn_text_flags {
	/* For a person's terminal: \n and \t are kept, a backslash is not
	   doubled. */
	KN_TEXT_TERMINAL = 1 << 0,
	/* More input follows: an incomplete UTF-8 sequence at the end is
	   left unread, for the caller to pass again with the next bytes. */
	KN_TEXT_MORE = 1 << 1,
};
/*
 * Render len bytes of src into dst: at most size - 1 bytes and a NUL,
 * never half an escape or a character. The output is valid UTF-8 and
 * holds no control character (but \n and \t with KN_TEXT_TERMINAL). Returns how many bytes of src
 * were rendered: len unless dst was too small (4 * len + 1 always
 * suffices) or KN_TEXT_MORE held back a sequence's start.
 */
size_t kn_text_escape(char *dst, size_t size, const char *src, size_t len,
		      unsigned flags);

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not. */
size_t kn_utf8_seq_len(const unsigned char *s, size_t avail);
/* Offset of the first NUL byte or invalid UTF-8 sequence, or len when
   there is none; *is_nul tells which. */
size_t kn_text_bad_byte(const char *text, size_t len, bool *is_nul);
/* 1-based line and column (in characters) of a byte offset. */
void kn_text_position(const char *text, size_t offset, int *line, int *col);

/*
 * CSV (RFC 4180), for every table kiln reads (the CSV files under data/,
 * cloud catalogs, openb traces). A field in double quotes may hold commas,
 * newlines and "" for a quote; CR before a newline is dropped (CRLF files
 * read as LF).
 */
/* The widest table kiln reads (a cloud catalog) has about 20 columns. */
#define KN_CSV_FIELDS_MAX 64
/* A real row is under 1 KiB; a longer record is a garbled file (an
   unclosed quote swallowing the rest) and is refused, not read as one
   huge field. */
#define KN_CSV_RECORD_MAX (64 * 1024)

/*
 * A reader over text the caller owns (NUL-terminated, split in place):
 * kn_csv_init, then kn_csv_next for each record, header first. Nothing to
 * release. Each field is unquoted and NUL-terminated, with the 1-based
 * line and column (in bytes) where it starts, for messages.
 */
struct kn_csv {
	const char *path; /* for messages */
	char *next;       /* where the next record starts */
	int next_line;
	int line; /* line where the current record starts */
	int n_fields;
	char *fields[KN_CSV_FIELDS_MAX];
	int lines[KN_CSV_FIELDS_MAX];
	int cols[KN_CSV_FIELDS_MAX];
};

void kn_csv_init(struct kn_csv *c, char *text, const char *path);
/*
 * The next record, blank lines skipped: 1 with c->fields filled, 0 at the
 * end of the text, or -EINVAL with "PATH:LINE:COLUMN: reason" (err field
 * NULL) for a quote inside an unquoted field, text after a closing quote,
 * an unclosed quote, more than KN_CSV_FIELDS_MAX fields or a record over
 * KN_CSV_RECORD_MAX bytes.
 */
int kn_csv_next(struct kn_csv *c, struct kn_error *err);
/* The index of the current record's field equal to name, or -1. */
int kn_csv_find(const struct kn_csv *c, const char *name);

/*
 * Read the next record as a header and find each of the n wanted columns
 * in it: col[w] is its index. 0, an error as kn_csv_next, or -EINVAL with
 * "PATH:LINE: no column \"NAME\"" (err field NAME) when one is absent
 * (the text is empty: LINE 1). Other columns stay to kn_csv_find.
 */
int kn_csv_header(struct kn_csv *c, const char *const *wanted, int n,
		  int *col, struct kn_error *err);

/* A record's n wanted cells, in wanted's order, at line of its file:
   0 to go on, 1 to stop reading, or an error (err filled). */
typedef int (*kn_csv_row_fn)(void *arg, char **cells, int line,
			     struct kn_error *err);
/*
 * Read the CSV file path (at most max bytes) whose header names each of
 * the n (at most KN_CSV_FIELDS_MAX) wanted columns, and give each record
 * after it to row. 0 at the end or once row says stop; else a negative
 * errno: "PATH: why" (err field `field`) when it cannot be read, as
 * kn_csv_next for a malformed record, as kn_csv_header for the header,
 * "PATH:LINE: N fields, too few" (err field `field`) for a record that
 * ends before a wanted column, or what row returned.
 */
int kn_csv_read_columns(const char *path, size_t max, const char *field,
			const char *const *wanted, int n, kn_csv_row_fn row,
			void *arg, struct kn_error *err);

/*
 * One text cell of a CSV that kiln writes, malloc'd: in double quotes
 * (with "" for a quote) when it holds a comma, quote, CR or LF, and
 * behind a single quote when it starts with '=', '+', '-', '@', a tab or
 * a CR, which a spreadsheet would run as a formula. Only for text: the
 * numbers a writer formats itself go out as they are, so -3.5 stays a
 * number.
 */
char *kn_csv_cell(const char *text);
/* Whether a cell starting with text would be read as a formula. */
bool kn_csv_formula_start(const char *text);

/* Fill buf with n cryptographically random bytes (getrandom). */
int kn_random_bytes(void *buf, size_t n);
/* Lowercase hex of n bytes into out (2n+1 bytes). */
void kn_hex(const unsigned char *in, size_t n, char *out);
/* The n bytes that hex, exactly 2n lowercase hex digits, spells into out;
   false when hex is not that (out may then be partly written). */
bool kn_unhex(const char *hex, size_t n, unsigned char *out);

/*
 * A binary min-heap of elements of one size (heap.c): pop gives the
 * element no other is before, as before(a, b) orders them. Zero it, set
 * size and before, push and pop; kn_heap_release frees the storage.
 */
struct kn_heap {
	void *v; /* n elements of size bytes, in heap order */
	size_t n, cap, size;
	bool (*before)(const void *a, const void *b);
};

/* Add a copy of the element at e. */
void kn_heap_push(struct kn_heap *h, const void *e);
/* Move the first element to out; the heap must not be empty. */
void kn_heap_pop(struct kn_heap *h, void *out);
void kn_heap_release(struct kn_heap *h);

#endif
