/* An executor instance: an engine's ops table and that engine's state. */
#include "exec.h"

#include <stdlib.h>

struct kn_executor *kn_executor_new(const struct kn_executor_ops *ops,
				    void *impl)
{
	struct kn_executor *ex = kn_xcalloc(1, sizeof(*ex));

	ex->ops = ops;
	ex->impl = impl;
	return ex;
}

int kn_task_stop_request(const char *task_dir, int signo, int64_t grace_ms,
			 struct kn_error *err)
{
	char *path = kn_asprintf("%s/stop.json", task_dir);
	char *text = kn_asprintf("{\"signal\":%d,\"grace_ms\":%lld}", signo,
				 (long long)grace_ms);
	int rc = kn_write_text_replace(path, text, 0600, err);

	KN_FREE_ALL(path, text);
	return rc;
}

void kn_executor_free(struct kn_executor *ex)
{
	if (!ex)
		return;
	if (ex->ops->release)
		ex->ops->release(ex);
	free(ex);
}
