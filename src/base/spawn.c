/* Detached children: the one way kiln starts a process it does not wait on. */
#include "base/base.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>

static void spawn_output(posix_spawn_file_actions_t *fa, int fd,
			 const char *path, int flags)
{
	if (!path)
		posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_WRONLY, 0);
	else
		posix_spawn_file_actions_addopen(fa, fd, path, flags, 0600);
}

int kn_spawn_detached(const struct kn_spawn *sp, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	int flags = O_WRONLY | O_CREAT | (sp->append ? O_APPEND : O_TRUNC) |
		    (sp->no_follow ? O_NOFOLLOW : 0);
	int rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	spawn_output(&fa, 1, sp->out_path, flags);
	if (sp->err_path && sp->out_path && !strcmp(sp->err_path, sp->out_path))
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	else
		spawn_output(&fa, 2, sp->err_path, flags);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID |
						POSIX_SPAWN_SETSIGMASK |
						POSIX_SPAWN_SETSIGDEF);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	rc = (sp->search ? posix_spawnp : posix_spawn)(pid, sp->path, &fa, &attr,
						       sp->argv, sp->envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return rc;
}
