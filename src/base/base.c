/*
 * base: errors, logging, clocks, strings, parsing of durations and sizes,
 * and file helpers. Allocation failure aborts: kiln cannot do anything
 * useful without memory and checking every small strdup obscures the code.
 */
#include "base.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum kn_log_level kn_log_level = KN_LOG_INFO;

static const struct {
	const char *name;
	int http;
	int err;
} errcode_table[] = {
	[KN_EOK] = {"ok", 200, 0},
	[KN_EINVAL] = {"invalid_argument", 400, EINVAL},
	[KN_ENOTFOUND] = {"not_found", 404, ENOENT},
	[KN_EAUTH] = {"unauthenticated", 401, EACCES},
	[KN_EPERM] = {"permission_denied", 403, EPERM},
	[KN_ECONFLICT] = {"conflict", 409, EEXIST},
	[KN_ETOOBIG] = {"too_large", 413, E2BIG},
	[KN_EIO] = {"internal", 500, EIO},
	[KN_EUNAVAIL] = {"unavailable", 503, EAGAIN},
	[KN_ELIMIT] = {"limit_exceeded", 429, EDQUOT},
	[KN_ENOSPACE] = {"insufficient_storage", 507, ENOSPC},
};

const char *kn_errcode_name(enum kn_errcode code)
{
	return errcode_table[code].name;
}

int kn_errcode_http(enum kn_errcode code)
{
	return errcode_table[code].http;
}

int kn_errcode_errno(enum kn_errcode code)
{
	return -errcode_table[code].err;
}

enum kn_errcode kn_errcode_for_write(int neg_errno)
{
	return neg_errno == -ENOSPC || neg_errno == -EDQUOT ? KN_ENOSPACE
							     : KN_EIO;
}

int kn_errorf(struct kn_error *err, enum kn_errcode code, const char *field,
	      const char *fmt, ...)
{
	if (err) {
		va_list ap;
		err->code = code;
		kn_strlcpy(err->field, field ? field : "", sizeof(err->field));
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return kn_errcode_errno(code);
}

/*
 * The whole message is escaped (kn_text_escape), not only the arguments
 * that came from outside: a caller cannot forget to, and nothing kiln
 * logs on purpose spans lines. One log record is then always one line,
 * whatever a checkpoint, file or token name holds. URLs lose their query
 * (kn_url_queries_cut) the same way: no caller can log a store's SAS.
 */
void kn_log(enum kn_log_level level, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	char ts[40], raw[KN_LOG_LINE_MAX], line[KN_LOG_LINE_MAX], *cut;
	size_t raw_len, shown, cut_len;
	va_list ap;
	int n;

	if (level < kn_log_level)
		return;
	kn_format_time(kn_now_ms(), ts, sizeof(ts));
	va_start(ap, fmt);
	n = vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	raw_len = n < 0 ? 0 : (size_t)n < sizeof(raw) ? (size_t)n
						      : sizeof(raw) - 1;
	cut = kn_url_queries_cut(raw, raw_len, &cut_len);
	if (!cut)
		cut_len = raw_len;
	shown = kn_text_escape(line, sizeof(line), cut ? cut : raw, cut_len, 0);
	free(cut);
	flockfile(stderr);
	fprintf(stderr, "%s %-5s %s%s\n", ts, names[level], line,
		shown < cut_len || (n > 0 && (size_t)n > raw_len) ? " [cut]"
								   : "");
	funlockfile(stderr);
}

int64_t kn_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec kn_realtime_in(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

int64_t kn_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* epoch_ms in UTC as fmt (to the second), then ".mmmZ". */
static void format_time(int64_t epoch_ms, const char *fmt, char *buf,
			size_t len)
{
	time_t secs = (time_t)(epoch_ms / 1000);
	struct tm tm;
	char tmp[32];

	gmtime_r(&secs, &tm);
	strftime(tmp, sizeof(tmp), fmt, &tm);
	snprintf(buf, len, "%s.%03dZ", tmp, (int)(epoch_ms % 1000));
}

void kn_format_time(int64_t epoch_ms, char *buf, size_t len)
{
	format_time(epoch_ms, "%Y-%m-%dT%H:%M:%S", buf, len);
}

void kn_format_time_basic(int64_t epoch_ms, char *buf, size_t len)
{
	format_time(epoch_ms, "%Y%m%dT%H%M%S", buf, len);
}

const char *kn_parse_time(const char *s, const char *format, int64_t *out_ms)
{
	struct tm tm;
	const char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(s, format, &tm);
	if (end)
		*out_ms = (int64_t)timegm(&tm) * 1000;
	return end;
}

void kn_format_duration(int64_t ms, char *buf, size_t len)
{
	if (ms < 0)
		ms = 0;
	if (ms < 1000)
		snprintf(buf, len, "%lldms", (long long)ms);
	else if (ms < 60000)
		snprintf(buf, len, "%llds", (long long)(ms / 1000));
	else if (ms < 3600000)
		snprintf(buf, len, "%lldm%llds", (long long)(ms / 60000),
			 (long long)(ms / 1000 % 60));
	else
		snprintf(buf, len, "%lldh%lldm", (long long)(ms / 3600000),
			 (long long)(ms / 60000 % 60));
}

void kn_format_ago(int64_t epoch_ms, int64_t now_ms, char *buf, size_t len)
{
	int64_t d;

	if (epoch_ms <= 0) {
		snprintf(buf, len, "-");
		return;
	}
	d = (now_ms - epoch_ms) / 1000;
	if (d < 0)
		d = 0;
	if (d < 60)
		snprintf(buf, len, "%llds ago", (long long)d);
	else if (d < 3600)
		snprintf(buf, len, "%lldm ago", (long long)(d / 60));
	else if (d < 86400)
		snprintf(buf, len, "%lldh ago", (long long)(d / 3600));
	else
		snprintf(buf, len, "%lldd ago", (long long)(d / 86400));
}

int kn_parse_duration(const char *s, int64_t *out_ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
		{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},
		{"d", 86400000},
	};
	const char *p = s;
	int64_t total = 0;
	bool any = false;

	if (!s || !*s)
		return -EINVAL;
	while (*p) {
		char *end;
		unsigned long long v;
		size_t i, best = SIZE_MAX;

		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		errno = 0;
		v = strtoull(p, &end, 10);
		if (errno || end == p)
			return -EINVAL;
		p = end;
		/* Longest unit first so "ms" is not read as "m" then "s". */
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t ul = strlen(units[i].unit);
			if (strncmp(p, units[i].unit, ul) == 0 &&
			    (best == SIZE_MAX ||
			     ul > strlen(units[best].unit)))
				best = i;
		}
		if (best == SIZE_MAX)
			return -EINVAL;
		if (v > (unsigned long long)(KN_DURATION_MAX_MS / units[best].ms) ||
		    total > KN_DURATION_MAX_MS - (int64_t)v * units[best].ms)
			return -EINVAL;
		total += (int64_t)v * units[best].ms;
		p += strlen(units[best].unit);
		any = true;
	}
	if (!any)
		return -EINVAL;
	*out_ms = total;
	return 0;
}

static const struct {
	const char *suffix;
	int64_t mult;
} size_suffixes[] = {
	{"Ti", 1LL << 40}, {"Gi", 1LL << 30}, {"Mi", 1LL << 20},
	{"Ki", 1LL << 10}, {"T", 1000000000000LL}, {"G", 1000000000LL},
	{"M", 1000000LL},  {"k", 1000LL},       {"K", 1000LL},
	{"", 1},
};
#define N_SIZE_SUFFIXES (sizeof(size_suffixes) / sizeof(size_suffixes[0]))

void kn_format_size(int64_t bytes, char *buf, size_t len)
{
	for (size_t i = 0; i < N_SIZE_SUFFIXES; i++) {
		if (bytes > 0 && bytes % size_suffixes[i].mult == 0) {
			snprintf(buf, len, "%lld%s",
				 (long long)(bytes / size_suffixes[i].mult),
				 size_suffixes[i].suffix);
			return;
		}
	}
	snprintf(buf, len, "%lld", (long long)bytes);
}

void kn_format_bytes(int64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%lld B", (long long)bytes);
		return;
	}
	v /= 1024;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
}

int kn_parse_size(const char *s, int64_t *out_bytes)
{
	char *end;
	unsigned long long v;
	size_t i;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	for (i = 0; i < N_SIZE_SUFFIXES; i++) {
		if (strcmp(end, size_suffixes[i].suffix) == 0) {
			if (v > (unsigned long long)(INT64_MAX /
						     size_suffixes[i].mult))
				return -EINVAL;
			*out_bytes = (int64_t)v * size_suffixes[i].mult;
			return 0;
		}
	}
	return -EINVAL;
}

const char *kn_env_get(char *const *env, const char *key)
{
	size_t n = strlen(key);

	for (char *const *e = env; e && *e; e++)
		if (!strncmp(*e, key, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

const char *kn_header_value(const char *const *names,
			    const char *const *values, size_t n,
			    const char *name)
{
	int first = tolower((unsigned char)name[0]);

	for (size_t i = 0; i < n; i++)
		if (tolower((unsigned char)names[i][0]) == first &&
		    !strcasecmp(names[i], name))
			return values[i];
	return NULL;
}

size_t kn_strlcpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);

	if (size) {
		size_t c = n < size - 1 ? n : size - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return n;
}

static void oom(void)
{
	fputs("kiln: out of memory\n", stderr);
	abort();
}

void *kn_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *kn_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

void kn_strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

void kn_free_each(void *const ptrs[], size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ptrs[i]);
}

void kn_strv_free_n(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void *kn_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom();
	return q;
}

void *kn_xgrow(void *p, size_t *alloc, size_t used, size_t size)
{
	if (used < *alloc)
		return p;
	if (*alloc > SIZE_MAX / 2 / size)
		oom();
	*alloc = *alloc ? *alloc * 2 : 16;
	return kn_xrealloc(p, *alloc * size);
}

char *kn_xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		oom();
	return p;
}

char *kn_asprintf(const char *fmt, ...)
{
	va_list ap;
	char *out;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&out, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom();
	return out;
}

int kn_levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	int *row, result;

	row = kn_xmalloc((lb + 1) * sizeof(int));
	for (j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (i = 1; i <= la; i++) {
		int prev = row[0];
		row[0] = (int)i;
		for (j = 1; j <= lb; j++) {
			int cur = row[j];
			int cost = a[i - 1] == b[j - 1] ? 0 : 1;
			int best = prev + cost;
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			prev = cur;
		}
	}
	result = row[lb];
	free(row);
	return result;
}

void kn_buf_init(struct kn_buf *b, size_t cap_limit)
{
	memset(b, 0, sizeof(*b));
	b->cap_limit = cap_limit;
}

void kn_buf_release(struct kn_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

int kn_buf_append(struct kn_buf *b, const void *data, size_t len)
{
	if (b->len + len > b->cap_limit)
		return -E2BIG;
	if (b->len + len + 1 > b->alloc) {
		size_t n = b->alloc ? b->alloc : 256;
		while (n < b->len + len + 1)
			n *= 2;
		b->data = kn_xrealloc(b->data, n);
		b->alloc = n;
	}
	if (len) /* data may be NULL then */
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int kn_buf_printf(struct kn_buf *b, const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n, rc;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom();
	rc = kn_buf_append(b, s, (size_t)n);
	free(s);
	return rc;
}

int kn_buf_append_url_encoded(struct kn_buf *b, const char *s,
			      bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	int rc = 0;

	for (; *s && rc == 0; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || strchr("-._~", c) ||
		    (keep_slash && c == '/')) {
			rc = kn_buf_append(b, s, 1);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};

			rc = kn_buf_append(b, e, 3);
		}
	}
	return rc;
}

int kn_mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	char *slash;
	int rc;

	/* The whole path first: usually only the last part is missing. */
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	if (kn_strlcpy(tmp, path, sizeof(tmp)) >= sizeof(tmp))
		return -ENAMETOOLONG;
	slash = strrchr(tmp, '/');
	while (slash && slash > tmp && slash[1] == '\0') {
		*slash = '\0';
		slash = strrchr(tmp, '/');
	}
	if (!slash || slash == tmp)
		return -ENOENT;
	*slash = '\0';
	rc = kn_mkdir_p(tmp, mode);
	if (rc < 0)
		return rc;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int write_file(const char *path, const void *data, size_t len,
		      mode_t mode, bool durable)
{
	char tmp[PATH_MAX];
	int fd, rc = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, getpid()) >=
	    sizeof(tmp))
		return -ENAMETOOLONG;
	/*
	 * The directory may be a task's: a link planted under the temporary
	 * name must not be followed, nor a file already there written.
	 */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  mode);
	if (fd < 0)
		return -errno;
	/* open() honours the umask; the caller's mode is what it asked for. */
	if (fchmod(fd, mode) < 0) {
		rc = -errno;
		goto out;
	}
	rc = kn_write_all(fd, data, len);
	if (rc == 0 && durable && fsync(fd) < 0)
		rc = -errno;
out:
	close(fd);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}

int kn_write_file_atomic(const char *path, const void *data, size_t len,
			 mode_t mode)
{
	return write_file(path, data, len, mode, true);
}

int kn_write_file_replace(const char *path, const void *data, size_t len,
			  mode_t mode)
{
	return write_file(path, data, len, mode, false);
}

static int write_text(const char *path, const char *text, mode_t mode,
		      bool durable, struct kn_error *err)
{
	int rc = write_file(path, text, strlen(text), mode, durable);

	if (rc < 0)
		return kn_errorf(err, kn_errcode_for_write(rc), NULL,
				 "cannot write %s: %s", path, strerror(-rc));
	return 0;
}

int kn_write_text_atomic(const char *path, const char *text, mode_t mode,
			 struct kn_error *err)
{
	return write_text(path, text, mode, true, err);
}

int kn_write_text_replace(const char *path, const char *text, mode_t mode,
			  struct kn_error *err)
{
	return write_text(path, text, mode, false, err);
}

int kn_read_fd(int fd, size_t max, char **out, size_t *out_len)
{
	struct kn_buf b;
	char chunk[65536];
	int rc = 0;

	kn_buf_init(&b, max);
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		if (kn_buf_append(&b, chunk, (size_t)n) < 0) {
			rc = -EFBIG;
			break;
		}
	}
	if (rc < 0) {
		kn_buf_release(&b);
		return rc;
	}
	if (!b.data)
		b.data = kn_xstrdup("");
	*out = b.data;
	if (out_len)
		*out_len = b.len;
	return 0;
}

bool kn_fd_unchanged(int fd, const struct stat *before)
{
	struct stat now;

	return fstat(fd, &now) == 0 && now.st_size == before->st_size &&
	       now.st_mtim.tv_sec == before->st_mtim.tv_sec &&
	       now.st_mtim.tv_nsec == before->st_mtim.tv_nsec &&
	       now.st_ctim.tv_sec == before->st_ctim.tv_sec &&
	       now.st_ctim.tv_nsec == before->st_ctim.tv_nsec;
}

int kn_read_file(const char *path, size_t max, char **out, size_t *out_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -errno;
	rc = kn_read_fd(fd, max, out, out_len);
	close(fd);
	return rc;
}

bool kn_dir_has_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool any = false;

	if (!d)
		return false;
	while (!any && (e = readdir(d)) != NULL)
		any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return any;
}

int kn_rm_rf(const char *path)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	int rc = 0;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	d = opendir(path);
	if (!d)
		return -errno;
	while ((e = readdir(d)) != NULL) {
		char *child;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		child = kn_asprintf("%s/%s", path, e->d_name);
		if (kn_rm_rf(child) < 0 && rc == 0)
			rc = -errno;
		free(child);
	}
	closedir(d);
	if (rmdir(path) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

int kn_thread_background(void)
{
	struct sched_param sp = {0};
	/* ioprio_set(IOPRIO_WHO_PROCESS, this thread, IOPRIO_CLASS_IDLE):
	 * glibc has no wrapper; class 3 in the top bits, level 0. */
	const int who_process = 1, class_idle = 3, class_shift = 13;
	int rc = 0;

	if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
		rc = -EPERM;
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) < 0 &&
	    rc == 0)
		rc = -errno;
	if (syscall(SYS_ioprio_set, who_process, 0,
		    class_idle << class_shift) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

void kn_run_threads(int n, void *(*fn)(void *), void *arg)
{
	pthread_t *tids = kn_xcalloc(n > 1 ? (size_t)n : 1, sizeof(*tids));
	int started = 0;

	for (int i = 1; i < n; i++)
		if (pthread_create(&tids[started], NULL, fn, arg) == 0)
			started++;
	fn(arg);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
}

int kn_random_bytes(void *buf, size_t n)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

void kn_hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

bool kn_unhex(const char *hex, size_t n, unsigned char *out)
{
	if (strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

/* ---- CSV ---- */

#define CSV_STR_(x) #x
#define CSV_STR(x) CSV_STR_(x)

/* What is wrong with a record: the first problem met while splitting it. */
enum csv_problem {
	CSV_OK,
	CSV_QUOTE_INSIDE, /* a '"' in a field that did not start with one */
	CSV_AFTER_QUOTE,  /* text between a closing '"' and the next ',' */
	CSV_UNCLOSED,     /* a quoted field still open at the end */
	CSV_TOO_MANY,     /* more than KN_CSV_FIELDS_MAX fields */
};

static const char *const CSV_PROBLEMS[] = {
	[CSV_QUOTE_INSIDE] = "a quote inside an unquoted field (quote the "
			     "whole field, and double the quotes in it)",
	[CSV_AFTER_QUOTE] = "text after a closing quote",
	[CSV_UNCLOSED] = "a quoted field is not closed",
	[CSV_TOO_MANY] = "more than " CSV_STR(KN_CSV_FIELDS_MAX) " fields",
};

/* One record as it is split: each field's start, and the first problem. */
struct csv_split {
	char *fields[KN_CSV_FIELDS_MAX];
	int lines[KN_CSV_FIELDS_MAX], cols[KN_CSV_FIELDS_MAX];
	int n;
	int line;     /* on entry the record's first line; then the next's */
	char *line_start;
	enum csv_problem problem;
	int problem_line, problem_col;
};

static void csv_note(struct csv_split *s, enum csv_problem problem,
		     const char *at)
{
	if (s->problem != CSV_OK)
		return;
	s->problem = problem;
	s->problem_line = s->line;
	s->problem_col = (int)(at - s->line_start) + 1;
}

static void csv_field(struct csv_split *s, char *r, char *w)
{
	if (s->n == KN_CSV_FIELDS_MAX) {
		csv_note(s, CSV_TOO_MANY, r);
		return;
	}
	s->lines[s->n] = s->line;
	s->cols[s->n] = (int)(r - s->line_start) + 1;
	s->fields[s->n++] = w;
}

/* A quoted field from the '"' at r; returns where it ends. */
static char *csv_quoted(struct csv_split *s, char *r, char **w)
{
	char *open = r;
	int open_line = s->line;
	char *open_line_start = s->line_start;

	for (r++; *r; r++) {
		if (*r == '"' && r[1] == '"') {
			*(*w)++ = *r++;
		} else if (*r == '"') {
			break;
		} else {
			if (*r == '\n') {
				s->line++;
				s->line_start = r + 1;
			}
			*(*w)++ = *r;
		}
	}
	if (*r)
		return r + 1;
	if (s->problem == CSV_OK) {
		s->line = open_line;
		s->line_start = open_line_start;
		csv_note(s, CSV_UNCLOSED, open);
	}
	return r;
}

/*
 * Split the record at *p in place (RFC 4180: a field in '"' may hold ',',
 * newlines and "" for a quote; CR before a newline is dropped) and move *p
 * past it. Returns the field count, 0 at the end of the text. A malformed
 * record is still split as best it can be: the problem is noted in s.
 */
static int csv_split(char **p, struct csv_split *s)
{
	char *start = *p, *r = *p, *w = *p;
	bool field_start = true;

	s->n = 0;
	s->problem = CSV_OK;
	s->line_start = start;
	if (!*r)
		return 0;
	csv_field(s, r, w);
	while (*r && *r != '\n') {
		if (*r == '"') {
			if (!field_start)
				csv_note(s, CSV_QUOTE_INSIDE, r);
			r = csv_quoted(s, r, &w);
			if (*r && *r != ',' && *r != '\n' && *r != '\r')
				csv_note(s, CSV_AFTER_QUOTE, r);
			field_start = false;
		} else if (*r == ',') {
			*w++ = '\0';
			r++;
			csv_field(s, r, w);
			field_start = true;
		} else if (*r == '\r') {
			r++;
		} else {
			*w++ = *r++;
			field_start = false;
		}
	}
	/* w may sit on the '\n' (nothing was unquoted): step past it before
	   the terminator overwrites it. */
	*p = *r ? r + 1 : r;
	if (*r)
		s->line++;
	*w = '\0';
	return s->n;
}

void kn_csv_init(struct kn_csv *c, char *text, const char *path)
{
	memset(c, 0, sizeof(*c));
	c->path = path;
	c->next = text;
	c->next_line = 1;
}

int kn_csv_next(struct kn_csv *c, struct kn_error *err)
{
	struct csv_split s;

	for (;;) {
		char *start = c->next;
		int n;

		s.line = c->next_line;
		n = csv_split(&c->next, &s);
		if (n == 0)
			return 0;
		c->line = c->next_line;
		c->next_line = s.line;
		if (s.problem != CSV_OK)
			return kn_errorf(err, KN_EINVAL, NULL, "%s:%d:%d: %s",
					 c->path, s.problem_line,
					 s.problem_col,
					 CSV_PROBLEMS[s.problem]);
		if ((size_t)(c->next - start) > KN_CSV_RECORD_MAX)
			return kn_errorf(err, KN_EINVAL, NULL,
					 "%s:%d:1: a record longer than %d "
					 "bytes",
					 c->path, c->line, KN_CSV_RECORD_MAX);
		if (n == 1 && !s.fields[0][0])
			continue; /* a blank line */
		c->n_fields = n;
		memcpy(c->fields, s.fields, (size_t)n * sizeof(c->fields[0]));
		memcpy(c->lines, s.lines, (size_t)n * sizeof(c->lines[0]));
		memcpy(c->cols, s.cols, (size_t)n * sizeof(c->cols[0]));
		return 1;
	}
}

int kn_csv_find(const struct kn_csv *c, const char *name)
{
	for (int i = 0; i < c->n_fields; i++)
		if (!strcmp(c->fields[i], name))
			return i;
	return -1;
}

int kn_csv_header(struct kn_csv *c, const char *const *wanted, int n,
		  int *col, struct kn_error *err)
{
	int rc = kn_csv_next(c, err);

	if (rc < 0)
		return rc;
	for (int w = 0; w < n; w++) {
		col[w] = kn_csv_find(c, wanted[w]);
		if (col[w] < 0)
			return kn_errorf(err, KN_EINVAL, wanted[w],
					 "%s:%d: no column \"%s\"", c->path,
					 c->line ? c->line : 1, wanted[w]);
	}
	return 0;
}

int kn_csv_read_columns(const char *path, size_t max, const char *field,
			const char *const *wanted, int n, kn_csv_row_fn row,
			void *arg, struct kn_error *err)
{
	char *text = NULL, *cells[KN_CSV_FIELDS_MAX];
	int col[KN_CSV_FIELDS_MAX], rc;
	struct kn_csv c;
	size_t len;

	if ((rc = kn_read_file(path, max, &text, &len)) < 0)
		return kn_errorf(err, KN_EIO, field, "%s: %s", path,
				 strerror(-rc));
	kn_csv_init(&c, text, path);
	rc = kn_csv_header(&c, wanted, n, col, err);
	while (rc == 0 && (rc = kn_csv_next(&c, err)) > 0) {
		rc = 0;
		for (int w = 0; w < n && rc == 0; w++) {
			if (c.n_fields <= col[w])
				rc = kn_errorf(err, KN_EINVAL, field,
					       "%s:%d: %d fields, too few",
					       path, c.line, c.n_fields);
			else
				cells[w] = c.fields[col[w]];
		}
		if (rc == 0)
			rc = row(arg, cells, c.line, err);
	}
	free(text);
	return rc < 0 ? rc : 0;
}

/* ---- git revisions ---- */

#define GIT_SMALL_FILE (64 * 1024)
#define GIT_PACKED_REFS_MAX (64 * 1024 * 1024)
/* A SHA-1 object id in hex; SHA-256 repositories use KN_SHA256_HEX. */
#define GIT_SHA1_HEX 40

static bool git_hex(const char *v, size_t n)
{
	if (n != GIT_SHA1_HEX && n != KN_SHA256_HEX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("0123456789abcdef", v[i]) || !v[i])
			return false;
	return true;
}

/* The first line of path, trimmed, malloc'd; NULL when unreadable. */
static char *git_line(const char *path)
{
	char *text = NULL;
	size_t len = 0;

	if (kn_read_file(path, GIT_SMALL_FILE, &text, &len) < 0)
		return NULL;
	text[strcspn(text, "\r\n")] = '\0';
	return text;
}

/* The git directory of the repository holding dir, malloc'd, or NULL. */
static char *git_dir_of(const char *dir)
{
	char *cur = realpath(dir, NULL);

	while (cur) {
		char *dot = kn_asprintf("%s/.git", cur), *slash, *line;
		struct stat st;
		bool found = stat(dot, &st) == 0;

		if (found && S_ISDIR(st.st_mode)) {
			free(cur);
			return dot;
		}
		/* A worktree or submodule: ".git" says where the rest is. */
		line = found && S_ISREG(st.st_mode) ? git_line(dot) : NULL;
		free(dot);
		if (line && !strncmp(line, "gitdir: ", 8)) {
			char *gd = line[8] == '/'
					   ? kn_xstrdup(line + 8)
					   : kn_asprintf("%s/%s", cur, line + 8);
			KN_FREE_ALL(line, cur);
			return gd;
		}
		free(line);
		slash = strrchr(cur, '/');
		if (!slash || slash == cur) {
			free(cur);
			return NULL;
		}
		*slash = '\0';
	}
	return NULL;
}

/* ref (e.g. refs/heads/main) as a loose ref under gd, else packed-refs. */
static int git_ref(const char *gd, const char *ref,
		   char out[KN_SHA256_HEX + 1])
{
	char *path = kn_asprintf("%s/%s", gd, ref), *line = git_line(path);
	char *text = NULL, *save = NULL;
	size_t len = 0;
	int rc = -ENOENT;

	free(path);
	if (line && git_hex(line, strlen(line))) {
		kn_strlcpy(out, line, 65);
		free(line);
		return 0;
	}
	free(line);
	path = kn_asprintf("%s/packed-refs", gd);
	if (kn_read_file(path, GIT_PACKED_REFS_MAX, &text, &len) == 0) {
		for (char *l = strtok_r(text, "\n", &save); l;
		     l = strtok_r(NULL, "\n", &save)) {
			char *sp = strchr(l, ' ');
			if (l[0] == '#' || l[0] == '^' || !sp ||
			    strcmp(sp + 1, ref) != 0 || !git_hex(l, sp - l))
				continue;
			*sp = '\0';
			kn_strlcpy(out, l, 65);
			rc = 0;
			break;
		}
	}
	KN_FREE_ALL(text, path);
	return rc;
}

int kn_git_revision(const char *dir, char out[KN_SHA256_HEX + 1])
{
	char *gd = git_dir_of(dir), *head = NULL, *path, *common, *cd;
	int rc = -ENOENT;

	if (!gd)
		return -ENOENT;
	path = kn_asprintf("%s/HEAD", gd);
	head = git_line(path);
	free(path);
	if (head && git_hex(head, strlen(head))) {
		kn_strlcpy(out, head, 65);
		rc = 0;
	} else if (head && !strncmp(head, "ref: ", 5)) {
		rc = git_ref(gd, head + 5, out);
		/* A linked worktree keeps its branches in the common dir. */
		path = kn_asprintf("%s/commondir", gd);
		common = rc < 0 ? git_line(path) : NULL;
		free(path);
		if (common) {
			cd = common[0] == '/' ? kn_xstrdup(common)
					      : kn_asprintf("%s/%s", gd, common);
			rc = git_ref(cd, head + 5, out);
			KN_FREE_ALL(cd, common);
		}
	}
	KN_FREE_ALL(head, gd);
	return rc;
}

/* Length of the valid UTF-8 sequence at s, or 0 if it is not valid. */
size_t kn_utf8_seq_len(const unsigned char *s, size_t avail)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates, beyond U+10FFFF. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

/* Whether the avail bytes at s start a UTF-8 sequence that more bytes
   could complete. */
static bool utf8_incomplete(const unsigned char *s, size_t avail)
{
	size_t need = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
		      : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		      : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
						     : 0;

	if (avail >= need)
		return false;
	for (size_t i = 1; i < avail; i++)
		if ((s[i] & 0xc0) != 0x80)
			return false;
	return true;
}

/*
 * The escape for the character of n bytes at s into esc, or 0 when it is
 * shown as it is. n is 0 for a byte that is not UTF-8.
 */
static size_t escape_of(const unsigned char *s, size_t n, unsigned flags,
			char esc[8])
{
	bool terminal = flags & KN_TEXT_TERMINAL;

	if (n == 0)
		return (size_t)snprintf(esc, 8, "\\x%02x", s[0]);
	if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0)
		return (size_t)snprintf(esc, 8, "\\u%04x", s[1]);
	if (n > 1)
		return 0;
	if (terminal && (s[0] == '\n' || s[0] == '\t'))
		return 0;
	switch (s[0]) {
	case '\n': return (size_t)snprintf(esc, 8, "\\n");
	case '\r': return (size_t)snprintf(esc, 8, "\\r");
	case '\t': return (size_t)snprintf(esc, 8, "\\t");
	case '\\': return terminal ? 0 : (size_t)snprintf(esc, 8, "\\\\");
	}
	if (s[0] < 0x20 || s[0] == 0x7f)
		return (size_t)snprintf(esc, 8, "\\x%02x", s[0]);
	return 0;
}

size_t kn_text_escape(char *dst, size_t size, const char *src, size_t len,
		      unsigned flags)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0, used = 0, n, piece_len;
	const char *piece;
	char esc[8];

	if (!size)
		return 0;
	while (i < len) {
		n = s[i] < 0x80 ? 1 : kn_utf8_seq_len(s + i, len - i);
		if (n == 0 && (flags & KN_TEXT_MORE) &&
		    utf8_incomplete(s + i, len - i))
			break;
		piece_len = escape_of(s + i, n, flags, esc);
		piece = piece_len ? esc : src + i;
		if (!piece_len)
			piece_len = n;
		if (used + piece_len >= size)
			break;
		memcpy(dst + used, piece, piece_len);
		used += piece_len;
		i += n ? n : 1;
	}
	dst[used] = '\0';
	return i;
}

bool kn_csv_formula_start(const char *text)
{
	return text[0] && strchr("=+-@\t\r", text[0]);
}

char *kn_csv_cell(const char *text)
{
	bool formula = kn_csv_formula_start(text);
	bool quote = formula || strpbrk(text, ",\"\r\n") != NULL;
	char *out = kn_xmalloc(2 * strlen(text) + 4), *p = out;

	if (quote)
		*p++ = '"';
	if (formula)
		*p++ = '\'';
	for (const char *s = text; *s; s++) {
		if (*s == '"')
			*p++ = '"';
		*p++ = *s;
	}
	if (quote)
		*p++ = '"';
	*p = '\0';
	return out;
}

int kn_dir_lock(const char *dir, const char *file, const char *holder,
		const char *label, struct kn_error *err)
{
	char *path = kn_asprintf("%s/%s", dir, file);
	char *text = NULL, line[96];
	int fd, rc, n, pid = 0;
	size_t len;

	rc = kn_mkdir_p(dir, 0700);
	fd = rc < 0 ? rc
		    : open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
			   0600);
	if (fd < 0) {
		rc = kn_errorf(err, KN_EIO, "home", "cannot open %s: %s", path,
			       strerror(rc < 0 ? -rc : errno));
		goto out;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		char who[32] = "";
		if (kn_read_fd(fd, 256, &text, &len) == 0)
			sscanf(text, "%d %31s", &pid, who);
		close(fd);
		if (e != EWOULDBLOCK) {
			rc = kn_errorf(err, KN_EIO, "home", "cannot lock %s: %s",
				       path, strerror(e));
			goto out;
		}
		kn_errorf(err, KN_ECONFLICT, "home",
			  "another kiln %s (pid %d) holds %s (%s)",
			  who[0] ? who : "process", pid, label, dir);
		rc = -EBUSY;
		goto out;
	}
	n = snprintf(line, sizeof(line), "%d %s\n", (int)getpid(), holder);
	if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)n, 0) != n) {
		rc = kn_errorf(err, KN_EIO, "home", "cannot write %s: %s", path,
			       strerror(errno));
		close(fd);
		goto out;
	}
	rc = fd;
out:
	KN_FREE_ALL(text, path);
	return rc;
}
