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

void kn_executor_free(struct kn_executor *ex)
{
	if (!ex)
		return;
	if (ex->ops->release)
		ex->ops->release(ex);
	free(ex);
}
