/*
 * libcurl, loaded on first use. kiln is not linked against libcurl:
 * this file defines the libcurl functions kiln calls, and the first one
 * that needs the library dlopens libcurl.so.4 and forwards to it from
 * then on. A command that makes no HTTP call (`kiln version`, `kiln
 * validate`, the task shim) so never maps libcurl and the thirty-odd
 * libraries it pulls in (TLS, SSH, LDAP, Kerberos, IDN, HTTP/2, ...),
 * whose loading and relocation were most of the CLI's start-up time.
 *
 * The CLI's requests to a server on the loopback over plain http do not
 * come here at all (src/cmd/cli_plain.c): for those, loading libcurl was
 * still most of a `kiln submit`'s CPU time.
 *
 * Rejected: dlopen at each call site (every module that speaks HTTP
 * would carry the indirection).
 *
 * curl_global_init only records its flags; the library's own is called
 * once, when it is loaded, under a pthread_once, which is also what makes
 * the lazy load safe from several threads. When the library cannot be
 * loaded, the calls that make something (curl_easy_init,
 * curl_multi_init, curl_slist_append, curl_easy_escape) return NULL and
 * the reason is said once on standard error; nothing else can be reached
 * without what those make.
 */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>

#define CURL_SONAME "libcurl.so.4"

/* The functions kiln calls, in libcurl; NULL until loaded. */
static struct {
	CURLcode (*global_init)(long);
	void (*global_cleanup)(void);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	void (*easy_cleanup)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	void (*easy_reset)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	char *(*easy_escape)(CURL *, const char *, int);
	CURLcode (*easy_send)(CURL *, const void *, size_t, size_t *);
	CURLcode (*easy_recv)(CURL *, void *, size_t, size_t *);
	void (*free_)(void *);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_perform)(CURLM *, int *);
	CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int,
				int, int *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
	CURLMcode (*multi_cleanup)(CURLM *);
	CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
} lib;

static long init_flags = CURL_GLOBAL_DEFAULT;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

/* Look every function up; all or none. */
static bool resolve(void *h)
{
	const struct {
		void **slot;
		const char *name;
	} syms[] = {
		{(void **)&lib.global_init, "curl_global_init"},
		{(void **)&lib.global_cleanup, "curl_global_cleanup"},
		{(void **)&lib.easy_init, "curl_easy_init"},
		{(void **)&lib.easy_setopt, "curl_easy_setopt"},
		{(void **)&lib.easy_perform, "curl_easy_perform"},
		{(void **)&lib.easy_cleanup, "curl_easy_cleanup"},
		{(void **)&lib.easy_getinfo, "curl_easy_getinfo"},
		{(void **)&lib.easy_reset, "curl_easy_reset"},
		{(void **)&lib.easy_strerror, "curl_easy_strerror"},
		{(void **)&lib.easy_escape, "curl_easy_escape"},
		{(void **)&lib.easy_send, "curl_easy_send"},
		{(void **)&lib.easy_recv, "curl_easy_recv"},
		{(void **)&lib.free_, "curl_free"},
		{(void **)&lib.slist_append, "curl_slist_append"},
		{(void **)&lib.slist_free_all, "curl_slist_free_all"},
		{(void **)&lib.multi_init, "curl_multi_init"},
		{(void **)&lib.multi_add_handle, "curl_multi_add_handle"},
		{(void **)&lib.multi_remove_handle, "curl_multi_remove_handle"},
		{(void **)&lib.multi_perform, "curl_multi_perform"},
		{(void **)&lib.multi_poll, "curl_multi_poll"},
		{(void **)&lib.multi_info_read, "curl_multi_info_read"},
		{(void **)&lib.multi_cleanup, "curl_multi_cleanup"},
		{(void **)&lib.multi_setopt, "curl_multi_setopt"},
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(*syms); i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot) {
			fprintf(stderr, "kiln: %s has no %s\n", CURL_SONAME,
				syms[i].name);
			return false;
		}
	}
	return true;
}

static void load(void)
{
	void *h = dlopen(CURL_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "kiln: cannot load %s: %s\n", CURL_SONAME,
			dlerror());
		return;
	}
	if (!resolve(h) || lib.global_init(init_flags) != CURLE_OK) {
		fprintf(stderr, "kiln: cannot start %s\n", CURL_SONAME);
		return;
	}
	loaded = true;
}

static bool ready(void)
{
	pthread_once(&load_once, load);
	return loaded;
}

CURLcode curl_global_init(long flags)
{
	init_flags = flags;
	return CURLE_OK;
}

void curl_global_cleanup(void)
{
	/* Only when loaded: checking must not load it. */
	if (loaded)
		lib.global_cleanup();
}

CURL *curl_easy_init(void)
{
	return ready() ? lib.easy_init() : NULL;
}

/*
 * curl_easy_setopt and curl_multi_setopt, defined alike: the value after
 * the option is read as the type the option's number says (curl.h's
 * CURLOPTTYPE_ ranges, the same for easy and multi options), and passed
 * on as that type: long, curl_off_t, or else an object, function or blob
 * pointer.
 */
#define SETOPT_FORWARD(name, code, handle_type, option_type, target)         \
	code name(handle_type *handle, option_type option, ...)               \
	{                                                                      \
		va_list ap;                                                    \
		code rc;                                                       \
                                                                               \
		va_start(ap, option);                                          \
		if (option < CURLOPTTYPE_OBJECTPOINT)                          \
			rc = target(handle, option, va_arg(ap, long));         \
		else if (option >= CURLOPTTYPE_OFF_T &&                        \
			 option < CURLOPTTYPE_BLOB)                            \
			rc = target(handle, option, va_arg(ap, curl_off_t));   \
		else                                                           \
			rc = target(handle, option, va_arg(ap, void *));       \
		va_end(ap);                                                    \
		return rc;                                                     \
	}

SETOPT_FORWARD(curl_easy_setopt, CURLcode, CURL, CURLoption, lib.easy_setopt)
SETOPT_FORWARD(curl_multi_setopt, CURLMcode, CURLM, CURLMoption,
	       lib.multi_setopt)

CURLcode curl_easy_perform(CURL *curl)
{
	return lib.easy_perform(curl);
}

void curl_easy_cleanup(CURL *curl)
{
	if (curl)
		lib.easy_cleanup(curl);
}

/* Every CURLINFO takes a pointer to where the answer goes. */
CURLcode curl_easy_getinfo(CURL *curl, CURLINFO info, ...)
{
	va_list ap;
	CURLcode rc;

	va_start(ap, info);
	rc = lib.easy_getinfo(curl, info, va_arg(ap, void *));
	va_end(ap);
	return rc;
}

void curl_easy_reset(CURL *curl)
{
	lib.easy_reset(curl);
}

const char *curl_easy_strerror(CURLcode code)
{
	return ready() ? lib.easy_strerror(code) : "libcurl could not be loaded";
}

/* A CONNECT_ONLY handle's bytes (an upgraded session's): loaded, since
   its connect was a perform. */
CURLcode curl_easy_send(CURL *curl, const void *buffer, size_t buflen,
			size_t *n)
{
	return lib.easy_send(curl, buffer, buflen, n);
}

CURLcode curl_easy_recv(CURL *curl, void *buffer, size_t buflen, size_t *n)
{
	return lib.easy_recv(curl, buffer, buflen, n);
}

char *curl_easy_escape(CURL *handle, const char *string, int length)
{
	return ready() ? lib.easy_escape(handle, string, length) : NULL;
}

void curl_free(void *p)
{
	if (p)
		lib.free_(p);
}

struct curl_slist *curl_slist_append(struct curl_slist *list,
				     const char *data)
{
	return ready() ? lib.slist_append(list, data) : NULL;
}

void curl_slist_free_all(struct curl_slist *list)
{
	if (list)
		lib.slist_free_all(list);
}

CURLM *curl_multi_init(void)
{
	return ready() ? lib.multi_init() : NULL;
}

CURLMcode curl_multi_add_handle(CURLM *multi, CURL *curl)
{
	return lib.multi_add_handle(multi, curl);
}

CURLMcode curl_multi_remove_handle(CURLM *multi, CURL *curl)
{
	return lib.multi_remove_handle(multi, curl);
}

CURLMcode curl_multi_perform(CURLM *multi, int *running)
{
	return lib.multi_perform(multi, running);
}

CURLMcode curl_multi_poll(CURLM *multi, struct curl_waitfd extra_fds[],
			  unsigned int extra_nfds, int timeout_ms, int *ret)
{
	return lib.multi_poll(multi, extra_fds, extra_nfds, timeout_ms, ret);
}

CURLMsg *curl_multi_info_read(CURLM *multi, int *msgs_in_queue)
{
	return lib.multi_info_read(multi, msgs_in_queue);
}

CURLMcode curl_multi_cleanup(CURLM *multi)
{
	return multi ? lib.multi_cleanup(multi) : CURLM_OK;
}

