/*
 * The client's side of an interactive session (session_term.h). One poll
 * loop over stdin, the connection and a signalfd (SIGWINCH for resizes;
 * SIGINT, SIGQUIT and SIGTERM passed to the process; SIGHUP ends the
 * session, our terminal being gone): no signal handlers. Our stdin is
 * read only while the process's stdin has credit, so a process that does
 * not read holds back our keys, not the connection. Output is written
 * to stdout before its credit is granted back: a slow terminal slows the
 * process's output and nothing else.
 */
#include "cmd/session_term.h"

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "mux/mux.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <curl/curl.h>

/* A quiet session pings this often, well inside the server's idle close. */
#define PING_MS 30000

struct term {
	void *conn;
	const struct session_term_opts *o;
	struct kn_mux_reader rd;
	struct kn_mux_window win[4]; /* by stream */
	bool raw;
	struct termios saved;
	bool held_p;   /* a Ctrl-P waits for the key after it */
	bool stdin_eof;
	bool ended, failed, detached;
	bool lost; /* the connection broke, rather than a refusal */
	int status;
	char why[KN_MUX_MAX_TEXT + 1];
};

bool session_term_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;

	if (ioctl(0, TIOCGWINSZ, &ws) < 0 && ioctl(1, TIOCGWINSZ, &ws) < 0)
		return false;
	if (!ws.ws_row || !ws.ws_col)
		return false;
	*rows = ws.ws_row;
	*cols = ws.ws_col;
	return true;
}

static void send_frame(struct term *t, const uint8_t *f, size_t n)
{
	if (!t->failed && cli_conn_send(t->conn, f, n) < 0) {
		t->failed = true;
		t->lost = true;
		snprintf(t->why, sizeof(t->why), "lost the connection");
	}
}

static void send_resize(struct term *t)
{
	uint8_t f[KN_MUX_MAX_FRAME];
	unsigned rows, cols;

	if (t->o->tty && session_term_size(&rows, &cols))
		send_frame(t, f, kn_mux_encode_resize(f, rows, cols));
}

static void take_frame(struct term *t, const struct kn_mux_frame *f)
{
	uint8_t w[KN_MUX_MAX_FRAME];
	struct kn_error err;
	uint32_t grant;
	int code, sig;

	switch (f->type) {
	case KN_MUX_DATA:
		if (f->stream != KN_MUX_STREAM_STDOUT &&
		    f->stream != KN_MUX_STREAM_STDERR)
			break;
		if (kn_mux_window_take(&t->win[f->stream], f->len, &err) < 0) {
			t->failed = true;
			kn_strlcpy(t->why, err.message, sizeof(t->why));
			break;
		}
		/* Our output gone: the bytes are dropped. */
		(void)kn_write_all(f->stream == KN_MUX_STREAM_STDOUT ? 1 : 2,
				   f->payload, f->len);
		if ((grant = kn_mux_window_consume(&t->win[f->stream],
						   f->len)))
			send_frame(t, w,
				   kn_mux_encode_window(w, f->stream, grant));
		break;
	case KN_MUX_WINDOW_UPDATE:
		if (f->stream == KN_MUX_STREAM_STDIN &&
		    kn_mux_window_grant(&t->win[f->stream],
					kn_mux_window_credit(f), &err) < 0) {
			t->failed = true;
			kn_strlcpy(t->why, err.message, sizeof(t->why));
		}
		break;
	case KN_MUX_EXIT:
		kn_mux_exit_status(f, &code, &sig);
		t->status = sig ? 128 + sig : code;
		kn_mux_text(f, t->why, sizeof(t->why));
		t->ended = true;
		break;
	case KN_MUX_ERROR:
		kn_mux_text(f, t->why, sizeof(t->why));
		t->failed = true;
		break;
	default:
		break;
	}
}

static void take_bytes(struct term *t, const char *data, size_t len)
{
	struct kn_mux_frame f;
	struct kn_error err;
	size_t off = 0;
	int rc = 0;

	while (off < len && !t->ended && !t->failed) {
		off += kn_mux_reader_fill(&t->rd, data + off, len - off);
		while (!t->ended && !t->failed &&
		       (rc = kn_mux_reader_next(&t->rd, &f, &err)) == 1)
			take_frame(t, &f);
		if (rc < 0) {
			t->failed = true;
			kn_strlcpy(t->why, err.message, sizeof(t->why));
		}
	}
}

static void read_conn(struct term *t)
{
	char buf[KN_MUX_MAX_FRAME];

	while (!t->ended && !t->failed) {
		size_t n = 0;
		CURLcode cc = curl_easy_recv(t->conn, buf, sizeof(buf), &n);
		if (cc == CURLE_AGAIN)
			return;
		if (cc != CURLE_OK || n == 0) {
			t->failed = true;
			t->lost = true;
			snprintf(t->why, sizeof(t->why),
				 "lost the connection");
			return;
		}
		take_bytes(t, buf, n);
	}
}

/* Keys to send, with Ctrl-P Ctrl-Q taken as a detach. */
static size_t filter_keys(struct term *t, const uint8_t *in, size_t n,
			  uint8_t *out)
{
	size_t m = 0;

	for (size_t i = 0; i < n && !t->detached; i++) {
		uint8_t b = in[i];
		if (!t->o->detachable) {
			out[m++] = b;
		} else if (t->held_p) {
			t->held_p = b == SESSION_DETACH_1;
			if (b == SESSION_DETACH_2) {
				t->detached = true;
			} else {
				out[m++] = SESSION_DETACH_1;
				if (b != SESSION_DETACH_1)
					out[m++] = b;
			}
		} else if (b == SESSION_DETACH_1) {
			t->held_p = true;
		} else {
			out[m++] = b;
		}
	}
	return m;
}

static void read_stdin(struct term *t)
{
	uint8_t in[KN_MUX_MAX_PAYLOAD / 2], out[KN_MUX_MAX_PAYLOAD],
		f[KN_MUX_MAX_FRAME];
	int64_t credit = t->win[KN_MUX_STREAM_STDIN].send;
	ssize_t n = read(0, in,
			 credit < (int64_t)sizeof(in) ? (size_t)credit
						      : sizeof(in));
	size_t m;

	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		t->stdin_eof = true;
		send_frame(t, f, kn_mux_encode(f, KN_MUX_END,
					       KN_MUX_STREAM_STDIN, NULL, 0));
		return;
	}
	m = filter_keys(t, in, (size_t)n, out);
	/* A held Ctrl-P may make m one more than the credit: it waits. */
	if (m && (int64_t)m <= t->win[KN_MUX_STREAM_STDIN].send) {
		kn_mux_window_spend(&t->win[KN_MUX_STREAM_STDIN], m);
		send_frame(t, f, kn_mux_encode(f, KN_MUX_DATA,
					       KN_MUX_STREAM_STDIN, out, m));
	}
}

static void take_signal(struct term *t, int sfd)
{
	struct signalfd_siginfo si;
	uint8_t f[KN_MUX_MAX_FRAME];

	if (read(sfd, &si, sizeof(si)) != sizeof(si))
		return;
	if (si.ssi_signo == SIGWINCH)
		send_resize(t);
	else if (si.ssi_signo == SIGHUP)
		t->detached = true;
	else
		send_frame(t, f, kn_mux_encode_signal(f, (int)si.ssi_signo));
}

static void raw_mode(struct term *t)
{
	struct termios raw;

	if (!t->o->tty || !isatty(0) || tcgetattr(0, &t->saved) < 0)
		return;
	raw = t->saved;
	cfmakeraw(&raw);
	if (tcsetattr(0, TCSANOW, &raw) == 0)
		t->raw = true;
}

static void loop(struct term *t, int sfd)
{
	int64_t next_ping = kn_mono_ms() + PING_MS;
	curl_socket_t sock = CURL_SOCKET_BAD;
	uint8_t f[KN_MUX_MAX_FRAME];

	curl_easy_getinfo(t->conn, CURLINFO_ACTIVESOCKET, &sock);
	while (!t->ended && !t->failed && !t->detached) {
		bool want_stdin = t->o->stdin_on && !t->stdin_eof &&
				  t->win[KN_MUX_STREAM_STDIN].send > 1;
		struct pollfd p[3] = {{(int)sock, POLLIN, 0},
				      {want_stdin ? 0 : -1, POLLIN, 0},
				      {sfd, POLLIN, 0}};
		int64_t wait = next_ping - kn_mono_ms();

		if (poll(p, 3, wait > 0 ? (int)wait : 0) < 0 &&
		    errno != EINTR)
			break;
		if (kn_mono_ms() >= next_ping) {
			send_frame(t, f, kn_mux_encode(f, KN_MUX_PING,
						       KN_MUX_STREAM_CONTROL,
						       NULL, 0));
			next_ping = kn_mono_ms() + PING_MS;
		}
		/* A resize that came before keys goes out before them. */
		if (p[2].revents)
			take_signal(t, sfd);
		if (p[0].revents)
			read_conn(t);
		if (p[1].revents && !t->ended && !t->failed &&
		    !t->detached)
			read_stdin(t);
	}
}

int session_term_run(void *conn, const char *early, size_t n_early,
		     const struct session_term_opts *o)
{
	struct term t = {.conn = conn, .o = o};
	uint8_t f[KN_MUX_MAX_FRAME];
	sigset_t mask, old;
	int sfd;

	kn_mux_reader_init(&t.rd);
	for (int i = 0; i < 4; i++)
		kn_mux_window_init(&t.win[i]);
	sigemptyset(&mask);
	sigaddset(&mask, SIGWINCH);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGQUIT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (!o->stdin_on)
		send_frame(&t, f, kn_mux_encode(f, KN_MUX_END,
						KN_MUX_STREAM_STDIN, NULL, 0));
	raw_mode(&t);
	send_resize(&t);
	take_bytes(&t, early, n_early);
	loop(&t, sfd);
	if (t.raw)
		tcsetattr(0, TCSANOW, &t.saved);
	if (sfd >= 0)
		close(sfd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (t.ended) {
		if (t.why[0])
			fprintf(stderr, "kiln: %s\n", t.why);
		return t.status;
	}
	if (t.detached) {
		fprintf(stderr, "\r\nkiln: detached; job %lld runs on: kiln "
				"attach %lld\n",
			(long long)o->job_id, (long long)o->job_id);
		return CLI_EXIT_OK;
	}
	/* A lost connection leaves the task running; a refusal says why. */
	fprintf(stderr, "%skiln: %s%s\n", t.raw ? "\r\n" : "",
		t.why[0] ? t.why : "the session ended",
		o->detachable && (!t.why[0] || t.lost)
			? "; the job runs on (kiln attach)"
			: "");
	return CLI_EXIT_FAIL;
}
