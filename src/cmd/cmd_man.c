/*
 * kiln man and kiln completion: manual pages and shell completion made
 * from the command table's help texts, so what `--help` says, the man
 * pages say, and completion offers, come from one place. The build runs
 * both to make the installed files.
 */
#include "cmd/cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static cli_runner cmd_man;

const struct cli_command cmd_man_entry = {
	.name = "man",
	.run = cmd_man,
	.summary = "print a manual page (roff)",
	.help = "usage: kiln man [COMMAND]\n"
		"\n"
		"Print kiln(1), or kiln-COMMAND(1), as roff made from the help texts:\n"
		"kiln man ls | man -l -. Installed pages come from this command.\n",
};

static cli_runner cmd_completion;

const struct cli_command cmd_completion_entry = {
	.name = "completion",
	.run = cmd_completion,
	.summary = "print the shell completion script",
	.help = "usage: kiln completion bash|zsh\n"
		"\n"
		"Print completion for bash or zsh: command names, each command's\n"
		"flags and subcommands (from their help), files otherwise. The\n"
		"package installs both; by hand: source <(kiln completion bash).\n",
};

/* Longest flag or subcommand name kept. */
#define WORD_MAX 64

/* A list of distinct words: a command's flags, or its subcommands. */
struct words {
	char (*w)[WORD_MAX];
	size_t n, cap;
};

static void words_add(struct words *ws, const char *s, size_t len)
{
	if (len == 0 || len >= WORD_MAX)
		return;
	for (size_t i = 0; i < ws->n; i++)
		if (strlen(ws->w[i]) == len && !strncmp(ws->w[i], s, len))
			return;
	if (ws->n == ws->cap) {
		ws->cap = ws->cap ? 2 * ws->cap : 16;
		ws->w = kn_xrealloc(ws->w, ws->cap * sizeof(*ws->w));
	}
	memcpy(ws->w[ws->n], s, len);
	ws->w[ws->n++][len] = '\0';
}

static bool flag_char(char c)
{
	return islower((unsigned char)c) || isdigit((unsigned char)c) ||
	       c == '-';
}

/*
 * The flags a help text names: `--long-name` anywhere, and `-x` standing
 * alone (after a space, '[' or '|'), as the help tables write them.
 */
static void help_flags(const char *help, struct words *out)
{
	for (const char *p = help; *p; p++) {
		bool start = p == help || isspace((unsigned char)p[-1]) ||
			     p[-1] == '[' || p[-1] == '|' || p[-1] == '(' ||
			     p[-1] == '`' || p[-1] == ',';
		size_t len;

		if (!start || p[0] != '-')
			continue;
		if (p[1] == '-' && islower((unsigned char)p[2])) {
			for (len = 2; flag_char(p[len]); len++)
				;
			while (p[len - 1] == '-')
				len--;
			words_add(out, p, len);
		} else if (isalpha((unsigned char)p[1]) &&
			   !isalnum((unsigned char)p[2]) && p[2] != '-') {
			words_add(out, p, 2);
		}
	}
	words_add(out, "--help", 6);
}

/* Subcommands: the lowercase word after `kiln NAME` on usage lines. */
static void help_verbs(const char *name, const char *help, struct words *out)
{
	char *prefix = kn_asprintf("kiln %s ", name);
	size_t plen = strlen(prefix);
	const char *line = help;

	while (line && *line && *line != '\n') {
		const char *p = line;

		while (*p == ' ')
			p++;
		if (!strncmp(p, "usage: ", 7))
			p += 7;
		if (!strncmp(p, prefix, plen)) {
			size_t len;

			p += plen;
			for (len = 0; flag_char(p[len]); len++)
				;
			if (len && islower((unsigned char)p[0]))
				words_add(out, p, len);
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	free(prefix);
}

/* Text as roff shows it: backslashes and leading dots made literal. */
static void roff_text(FILE *f, const char *text)
{
	bool bol = true;

	for (const char *p = text; *p; p++) {
		if (bol && (*p == '.' || *p == '\''))
			fputs("\\&", f);
		bol = *p == '\n';
		if (*p == '\\')
			fputs("\\e", f);
		else if (*p == '-')
			fputs("\\-", f);
		else
			fputc(*p, f);
	}
	if (!bol)
		fputc('\n', f);
}

static const char see_also_env[] =
	".SH ENVIRONMENT\n"
	".TP\n.B KILN_HOME\nthe state directory (default ~/.kiln): the "
	"server's database and, for the CLI, server.url and admin.token\n"
	".TP\n.B KILN_SERVER\nthe API server's URL, when \\-\\-server is not "
	"given\n"
	".TP\n.B KILN_TOKEN\nthe API token, when \\-\\-token is not given\n"
	".TP\n.B KILN_DATA_DIR\nwhere kiln's data files are (GPU and VM "
	"catalogs, MIG profiles, model presets, alert rules); default "
	"share/kiln beside the binary's prefix\n";

/* kiln(1): the commands, the global flags, the environment. */
static void man_kiln(FILE *f)
{
	size_t n;
	const struct cli_command *const *cmds = cli_commands(&n);
	char *help = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&help, &len);

	cli_print_help(mem);
	fclose(mem);
	fprintf(f, ".TH KILN 1 \"\" \"kiln %s\" \"kiln manual\"\n"
		   ".SH NAME\nkiln \\- run AI workloads on rented GPU "
		   "machines\n.SH SYNOPSIS\n.nf\n", KN_VERSION);
	roff_text(f, help);
	fputs(".fi\n.SH COMMANDS\n", f);
	for (size_t i = 0; i < n; i++)
		if (!cmds[i]->hidden)
			fprintf(f, ".TP\n.BR kiln\\-%s (1)\n%s\n",
				cmds[i]->name, cmds[i]->summary);
	fputs(see_also_env, f);
	fputs(".SH SEE ALSO\n", f);
	for (size_t i = 0, k = 0; i < n; i++)
		if (!cmds[i]->hidden)
			fprintf(f, "%s.BR kiln\\-%s (1)", k++ ? ",\n" : "",
				cmds[i]->name);
	fputs("\n", f);
	free(help);
}

/* kiln-NAME(1): the command's help, usage lines first. */
static void man_command(FILE *f, const struct cli_command *c)
{
	const char *body = strstr(c->help, "\n\n");
	char *usage = kn_asprintf("%.*s\n",
				  (int)(body ? body - c->help
					     : (long)strlen(c->help)),
				  c->help);

	fprintf(f, ".TH KILN\\-%s 1 \"\" \"kiln %s\" \"kiln manual\"\n"
		   ".SH NAME\nkiln\\-%s \\- %s\n.SH SYNOPSIS\n.nf\n",
		c->name, KN_VERSION, c->name, c->summary);
	roff_text(f, usage);
	fputs(".fi\n", f);
	if (body) {
		fputs(".SH DESCRIPTION\n.nf\n", f);
		roff_text(f, body + 2);
		fputs(".fi\n", f);
	}
	fputs(see_also_env, f);
	fputs(".SH SEE ALSO\n.BR kiln (1)\n", f);
	free(usage);
}

static int cmd_man(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL;
	const struct cli_command *c;
	int rc = cli_parse_positionals(ctx, argc, argv, NULL, &name, 1,
				       &(size_t){0});

	if (rc != CLI_GO)
		return rc;
	if (!name) {
		man_kiln(stdout);
		return CLI_EXIT_OK;
	}
	c = cli_find_command(name);
	if (!c || c->hidden)
		return cli_usage_error(ctx, "no command '%s'; see 'kiln "
					    "--help'", name);
	man_command(stdout, c);
	return CLI_EXIT_OK;
}

static void print_words(FILE *f, const struct words *ws)
{
	for (size_t i = 0; i < ws->n; i++)
		fprintf(f, "%s%s", i ? " " : "", ws->w[i]);
}

/* A summary inside zsh's single quotes (after the name and the colon
   _describe splits at; later colons are the summary's). */
static void zsh_quoted(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
}

/* Both shells: a case that sets opts and subs to the flags and
   subcommands of the command's word. */
static void command_cases(FILE *f)
{
	size_t n;
	const struct cli_command *const *cmds = cli_commands(&n);

	fputs("    case $cmd in\n", f);
	for (size_t i = 0; i < n; i++) {
		struct words flags = {0}, verbs = {0};

		if (cmds[i]->hidden)
			continue;
		help_flags(cmds[i]->help, &flags);
		help_verbs(cmds[i]->name, cmds[i]->help, &verbs);
		fprintf(f, "        %s) opts='", cmds[i]->name);
		print_words(f, &flags);
		fputs("'; subs='", f);
		print_words(f, &verbs);
		fputs("' ;;\n", f);
		KN_FREE_ALL(flags.w, verbs.w);
	}
	fputs("        *) opts=''; subs='' ;;\n"
	      "    esac\n", f);
}

/* Each listed command's name: bash's word list ("ls submit ..."), or
   with its summary, zsh's _describe entries, one a line. */
static void command_names(FILE *f, bool summaries)
{
	size_t n;
	const struct cli_command *const *cmds = cli_commands(&n);

	for (size_t i = 0; i < n; i++) {
		if (cmds[i]->hidden)
			continue;
		if (!summaries) {
			fprintf(f, "%s ", cmds[i]->name);
			continue;
		}
		fprintf(f, "        '%s:", cmds[i]->name);
		zsh_quoted(f, cmds[i]->summary);
		fputs("'\n", f);
	}
}

static const char global_flags[] = "--server --token -o --output --help "
				   "--version";

/* Both shells: find the command's word (skipping the global flags and
   their values) from word FIRST below the one completed, in ARRAY. */
static void scan_for_command(FILE *f, int first, const char *limit,
			     const char *array)
{
	fprintf(f, "    for ((i = %d; i < %s; i++)); do\n"
		   "        case ${%s[i]} in\n"
		   "            --server|--token|-o|--output) ((i++)) ;;\n"
		   "            -*) ;;\n"
		   "            *) cmd=${%s[i]}; at=$i; break ;;\n"
		   "        esac\n"
		   "    done\n", first, limit, array, array);
}

static void completion_bash(FILE *f)
{
	fputs("# bash completion for kiln (made by `kiln completion bash`)\n"
	      "_kiln()\n{\n"
	      "    local cur=${COMP_WORDS[COMP_CWORD]} cmd='' at=0 i\n"
	      "    local opts subs\n", f);
	scan_for_command(f, 1, "COMP_CWORD", "COMP_WORDS");
	fputs("    if [[ -z $cmd ]]; then\n"
	      "        COMPREPLY=($(compgen -W '", f);
	command_names(f, false);
	fprintf(f, "%s' -- \"$cur\"))\n"
		   "        return\n"
		   "    fi\n", global_flags);
	command_cases(f);
	fprintf(f, "    if [[ $cur == -* ]]; then\n"
		   "        COMPREPLY=($(compgen -W \"$opts %s\" -- \"$cur\"))\n"
		   "    elif [[ -n $subs && $COMP_CWORD -eq $((at + 1)) ]]; then\n"
		   "        COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))\n"
		   "    fi\n"
		   "}\n"
		   "complete -o default -F _kiln kiln\n", global_flags);
}

static void completion_zsh(FILE *f)
{
	fputs("#compdef kiln\n"
	      "# zsh completion for kiln (made by `kiln completion zsh`)\n"
	      "_kiln() {\n"
	      "    local -a commands\n"
	      "    local cmd='' at=0 i opts subs\n"
	      "    commands=(\n", f);
	command_names(f, true);
	fputs("    )\n", f);
	scan_for_command(f, 2, "CURRENT", "words");
	fprintf(f, "    if [[ -z $cmd ]]; then\n"
		   "        if [[ $PREFIX == -* ]]; then\n"
		   "            compadd -- %s\n"
		   "        else\n"
		   "            _describe 'command' commands\n"
		   "        fi\n"
		   "        return\n"
		   "    fi\n", global_flags);
	command_cases(f);
	fprintf(f, "    if [[ $PREFIX == -* ]]; then\n"
		   "        compadd -- ${=opts} %s\n"
		   "    elif [[ -n $subs && $CURRENT -eq $((at + 1)) ]]; then\n"
		   "        compadd -- ${=subs}\n"
		   "    else\n"
		   "        _files\n"
		   "    fi\n"
		   "}\n"
		   "_kiln \"$@\"\n", global_flags);
}

static int cmd_completion(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *shell = NULL;
	int rc = cli_parse(ctx, argc, argv, NULL, "SHELL", &shell);

	if (rc != CLI_GO)
		return rc;
	if (!strcmp(shell, "bash"))
		completion_bash(stdout);
	else if (!strcmp(shell, "zsh"))
		completion_zsh(stdout);
	else
		return cli_usage_error(ctx, "no completion for '%s' (bash or "
					    "zsh)", shell);
	return CLI_EXIT_OK;
}
