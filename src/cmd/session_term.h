/*
 * session_term: the client's side of an interactive session (`kiln run
 * -it`, `kiln attach`, `kiln exec`) once the server upgraded the
 * connection: this terminal in raw mode, its keys to the process's
 * stdin, the process's output to stdout and stderr, window sizes and
 * signals passed on, in the frames of src/mux with their credit.
 */
#ifndef KILN_CMD_SESSION_TERM_H
#define KILN_CMD_SESSION_TERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct session_term_opts {
	bool tty;       /* the process has a terminal: ours goes raw */
	bool stdin_on;  /* our stdin is sent (else it ends at once) */
	bool detachable; /* Ctrl-P Ctrl-Q leaves the process running */
	int64_t job_id; /* for the detach message */
};

/* Detaching, as Docker's: Ctrl-P then Ctrl-Q. */
#define SESSION_DETACH_1 0x10
#define SESSION_DETACH_2 0x11

/*
 * Run the session on conn (cli_client_upgrade's), early being what came
 * behind the 101. Returns the exit status to give: the process's exit
 * code, 128 + the signal that killed it, 0 after a detach, or
 * CLI_EXIT_FAIL after printing why the session broke.
 */
int session_term_run(void *conn, const char *early, size_t n_early,
		     const struct session_term_opts *o);

/* Our terminal's size (stdin's, else stdout's): false when neither is
   one. */
bool session_term_size(unsigned *rows, unsigned *cols);

#endif
