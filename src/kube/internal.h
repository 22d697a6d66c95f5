/*
 * Between the executor's worker (executor.c) and the deployments it
 * keeps in step (deploy.c): one thread makes every API call.
 */
#ifndef KILN_KUBE_INTERNAL_H
#define KILN_KUBE_INTERNAL_H

#include <stdbool.h>

#include "kube/kube.h"

/* Wake the worker now (deployments changed); no-op when it is not up. */
void kube_exec_wake(void);
/* The running executor's configuration, or NULL. Loop thread. */
const struct kn_kube_exec_config *kube_exec_config(void);

/*
 * One pass of the worker over the deployments: create, update, scale and
 * delete what differs from what the API has, and take each one's status.
 * No request when no deployment is wanted nor left to delete.
 */
void kube_deploy_turn(struct kn_kube_client *c, const char *ns,
		      volatile const int *stop);
/* Forget every deployment (the executor stops). */
void kube_deploy_clear(void);

#endif
