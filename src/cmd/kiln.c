/*
 * kiln: main() and the subcommand table.
 *
 * Git-style: `kiln [GLOBAL FLAGS] COMMAND [ARGS]`. main() reads global
 * flags up to the command's name, finds the command in the table and hands
 * it the rest; the command parses its own flags and any global flags that
 * come after its name (cli_parse). The server and the task shim are
 * handed their arguments untouched, except that `--help` right after
 * their name prints their entry's help like every other command's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/base.h"
#include "cmd/cli.h"

static const struct cli_command commands[] = {
	{"server", NULL, cmd_server,
	 "run the control plane: API, scheduler, executors",
	 cmd_server_help,
	 false},
	{"submit", cmd_submit, NULL, "submit a job spec and print its id",
	 "usage: kiln submit FILE [--wait | -f] [--hold] [--name N]\n"
	 "                   [--env K=V]... [--gpus G] [--tasks N]\n"
	 "                   [--priority P] [--preemptible] [--array A-B[%P]]\n"
	 "\n"
	 "Submit the job spec in FILE (YAML or JSON; - reads standard input)\n"
	 "and print the new job's id alone on standard output, so scripts can\n"
	 "capture it: id=$(kiln submit job.yaml). Specs larger than 256 KiB\n"
	 "are refused before anything is sent. A job no node could ever hold\n"
	 "(more GPUs per task than the largest node has) is refused, with why.\n"
	 "\n"
	 "  --hold  queue it anyway, for a node that may join\n"
	 "  --name N, --env K=V (repeatable), --gpus G, --tasks N,\n"
	 "  --priority P, --preemptible\n"
	 "          override the file's field for this job; checked as the\n"
	 "          file is, and listed by `kiln show` as overrides\n"
	 "  --array A-B[%P]\n"
	 "          a job array: one job per index A..B (at most P at once),\n"
	 "          each with KILN_ARRAY_INDEX and SLURM_ARRAY_TASK_ID set;\n"
	 "          the id printed is the array's (its first element's)\n"
	 "  --wait  wait for the job to end, print its final state on standard\n"
	 "          error, and exit 0 if it succeeded, 4 if it failed, 5 if it\n"
	 "          was cancelled; for an array, until every element has ended\n"
	 "  -f, --follow\n"
	 "          as --wait, printing every rank's output meanwhile (lines\n"
	 "          prefixed [rank N]); exit with the job's exit code when it\n"
	 "          failed with one\n",
	 false},
	{"ls", cmd_ls, NULL, "list jobs",
	 "usage: kiln ls [--state S] [--owner O] [--all] [-w]\n"
	 "               [-o table|wide|json|yaml|name] [--no-headers]\n"
	 "\n"
	 "List jobs, oldest first: ID NAME STATE TASKS GPUS (per task) OWNER\n"
	 "AGE (since submission) DURATION (running so far, or in total)\n"
	 "REASON (why queued, or why it ended). Names and reasons are cut,\n"
	 "ending in \u2026, so that rows fit 80 columns. A job array is one row,\n"
	 "ID[FIRST-LAST], its state its busiest element's and its REASON how\n"
	 "many elements are in each state.\n"
	 "\n"
	 "  --state S     only jobs in state S: queued, running, succeeded,\n"
	 "                failed, cancelled or preempted\n"
	 "  --owner O     only jobs submitted with the token named O\n"
	 "  --all         every job; this is the default, spelled out\n"
	 "  -w, --watch   draw again whenever the server's event stream says\n"
	 "                a job or node changed (no polling); until\n"
	 "                interrupted\n"
	 "  -o wide       the table with nothing cut\n"
	 "  -o json|yaml  print the server's answer instead of a table\n"
	 "  -o name       the job ids alone, one a line\n"
	 "  --no-headers  the table without its header row\n",
	 false},
	{"show", cmd_show, NULL, "show a job, its attempts and their tasks",
	 "usage: kiln show ID|ID[K] [-o table|json|yaml|name]\n"
	 "\n"
	 "Show job ID: name, state, owner, priority, tasks, resources, when it\n"
	 "was submitted, started and ended, retries, the reason it is\n"
	 "queued or ended, its inputs (short sha256 once fetched) and\n"
	 "outputs; then each attempt with its tasks (rank, node, devices,\n"
	 "exit). For a job array, its elements (index, id, state, attempts,\n"
	 "exit); ID[K] shows element K alone.\n"
	 "\n"
	 "  -o json  print the server's JSON, including the spec\n",
	 false},
	{"port-forward", cmd_port_forward, NULL,
	 "forward a local port to a port a job's task listens on",
	 "usage: kiln port-forward ID|ID[K] LOCAL:REMOTE [--task N]\n"
	 "                         [--address A]\n"
	 "\n"
	 "Listen on A:LOCAL and carry every connection made there to port\n"
	 "REMOTE of the job's task (a notebook, TensorBoard, a model server\n"
	 "under test), each over an API connection of its own: the task\n"
	 "listens on loopback and nothing of it is exposed on the network.\n"
	 "Waits for a queued job to start; runs until interrupted. LOCAL 0\n"
	 "picks a free port; the first line printed names it. The job's\n"
	 "owner and operators only.\n"
	 "\n"
	 "  --task N     the task's rank (default 0)\n"
	 "  --address A  the local address to listen on (default 127.0.0.1)\n",
	 false},
	{"logs", cmd_logs, NULL, "print or follow a task's output",
	 "usage: kiln logs ID|ID[K] [--task N | --all] [--attempt K] [--tail N]\n"
	 "                 [--since DUR] [--timestamps] [-f] [--raw]\n"
	 "\n"
	 "Print the output (stdout and stderr) of one task of job ID (or of\n"
	 "element K of job array ID) as it arrives. On a terminal, escape sequences and other control\n"
	 "characters but newline and tab are shown escaped (\\x1b, \\r,\n"
	 "\\u009b), so a task cannot drive the terminal; into a pipe or a\n"
	 "file the bytes pass unchanged.\n"
	 "\n"
	 "  --task N     the task's rank (default 0)\n"
	 "  --all        every rank, each line prefixed [rank N]\n"
	 "  --attempt K  the attempt (default the latest)\n"
	 "  --tail N     only the last N lines (then, with -f, what follows)\n"
	 "  --since DUR  only lines that came in the last DUR (90s, 5m, 2h)\n"
	 "  --timestamps each line led by when it came (UTC, ms)\n"
	 "  -f, --follow keep printing until the task has ended; a queued job\n"
	 "               is waited for\n"
	 "  --raw        the bytes as they are, on a terminal too\n",
	 false},
	{"run", cmd_run, NULL, "run a command on a terminal in a new job",
	 "usage: kiln run -it [--gpus N] [--image I] [--name N] [-- CMD [ARG...]]\n"
	 "\n"
	 "Submit a job whose one task runs CMD (default a login shell, bash -l)\n"
	 "on a terminal, wait for it to start (queued like any job, with its\n"
	 "GPUs, limits and sandbox), then attach this terminal to it: keys,\n"
	 "window size and Ctrl-C go to the task, its output comes back, and\n"
	 "kiln exits with its exit code (128 + N when signal N ended it).\n"
	 "Ctrl-P Ctrl-Q detaches and leaves it running, as does a lost\n"
	 "connection; `kiln attach ID` comes back. Local, Slurm and\n"
	 "Kubernetes executors (there the pod's container gets the terminal).\n"
	 "\n"
	 "  -i, --stdin  send this terminal's keys (required, with -t)\n"
	 "  -t, --tty    the task runs on a terminal (required)\n"
	 "  --gpus N     GPUs for the task (default 0)\n"
	 "  --image I    the job's container image (an executor's that runs\n"
	 "               images; the local one runs CMD on the machine)\n"
	 "  --name N     the job's name (default run)\n",
	 false},
	{"attach", cmd_attach, NULL, "attach this terminal to a job's terminal",
	 "usage: kiln attach ID [--task N] [--port LOCAL:REMOTE]\n"
	 "\n"
	 "Attach this terminal to the terminal of job ID's task (one started\n"
	 "with kiln run -it, or a spec with tty: true), showing first what it\n"
	 "printed last (up to 64 KiB). Another client attached to it is\n"
	 "detached. Ctrl-P Ctrl-Q detaches; kiln exits with the task's exit\n"
	 "code when it ends meanwhile. The job's owner and operators only.\n"
	 "\n"
	 "  --task N              the task's rank (default 0)\n"
	 "  --port LOCAL:REMOTE   also forward 127.0.0.1:LOCAL to the task's\n"
	 "                        port REMOTE while attached, as kiln\n"
	 "                        port-forward does\n",
	 false},
	{"exec", cmd_exec, NULL, "run a command beside a running task",
	 "usage: kiln exec ID [--task N] [-i] [-t] -- CMD [ARG...]\n"
	 "\n"
	 "Run CMD in the sandbox of job ID's running task (its namespaces,\n"
	 "cgroup, user, devices and environment, CUDA_VISIBLE_DEVICES\n"
	 "included), with its output here, and exit with its exit code (128\n"
	 "+ N when signal N ended it). CMD ends when this command does.\n"
	 "The job's owner and operators only; each exec is audited with its\n"
	 "command line.\n"
	 "\n"
	 "  --task N     the task's rank (default 0)\n"
	 "  -i, --stdin  send standard input to CMD (else it gets none)\n"
	 "  -t, --tty    run CMD on a terminal (this one goes raw); without,\n"
	 "               its stdout and stderr come apart\n",
	 false},
	{"cancel", cmd_cancel, NULL, "cancel jobs",
	 "usage: kiln cancel ID|ID[K]...\n"
	 "       kiln cancel [--state S] [--name N] [--owner O] | --all [--yes]\n"
	 "\n"
	 "Ask the server to cancel the jobs named, or the queued and running\n"
	 "jobs the filters match (the filters combine). A job array's ID\n"
	 "cancels every element not ended; ID[K] element K alone. A queued job is\n"
	 "cancelled at once; a running job's tasks are signalled and the job\n"
	 "ends `cancelled`. One line per job; a job that cannot be cancelled\n"
	 "is said on standard error and the others still are (exit 1).\n"
	 "Users may cancel their own jobs; operators and admins any job.\n"
	 "\n"
	 "  --state S   the jobs in state S\n"
	 "  --name N    the jobs named N\n"
	 "  --owner O   the jobs submitted with the token named O\n"
	 "  --all       every job not ended (asks first, at a terminal)\n"
	 "  -y, --yes   no question for --all\n",
	 false},
	{"evict", cmd_evict, NULL, "preempt running jobs; they resume later",
	 "usage: kiln evict ID|ID[K]... [--grace DURATION] [--reason TEXT]\n"
	 "       kiln evict [--state S] [--name N] [--owner O] | --all [--yes]\n"
	 "\n"
	 "Evict each running job named (or the running jobs the filters\n"
	 "match; an array's ID: its running elements, ID[K]: element K)\n"
	 "the way a spot eviction would: each task gets\n"
	 "the job's checkpoint.signal (default SIGTERM), then SIGKILL after\n"
	 "--grace (default: the job's checkpoint.grace, else the server's kill\n"
	 "grace). The attempt ends `preempted` and the job goes back to the\n"
	 "queue ahead of newer jobs of its priority, without using a retry.\n"
	 "Only jobs whose spec says `preemptible: true` can be evicted. Users\n"
	 "may evict their own jobs; operators and admins any job.\n"
	 "\n"
	 "  --state S   the jobs in state S\n"
	 "  --name N    the jobs named N\n"
	 "  --owner O   the jobs submitted with the token named O\n"
	 "  --all       every job running (asks first, at a terminal)\n"
	 "  -y, --yes   no question for --all\n",
	 false},
	{"drain", cmd_drain, NULL, "stop new work on a node and evict its preemptible jobs",
	 "usage: kiln drain NODE [--reason TEXT]\n"
	 "       kiln drain --rolling POOL --command PATCH_CMD\n"
	 "                  [--surge-timeout DUR] [--no-wait]\n"
	 "\n"
	 "Mark NODE draining: it gets no new work, its preemptible jobs are\n"
	 "evicted (and resume elsewhere or later), the others run to their end.\n"
	 "`kiln uncordon NODE` makes it ready again. Operators and admins.\n"
	 "\n"
	 "--rolling POOL maintains the pool's nodes one at a time on the\n"
	 "server (a tracked operation: GET /v1/pools/POOL/rolling; a CLI\n"
	 "that goes away does not stop it): cordon; replace each deployment\n"
	 "replica on the node by a surge replica started elsewhere first,\n"
	 "the old one stopped only once the new one is ready and routed, so\n"
	 "even a one-replica deployment keeps serving (--surge-timeout,\n"
	 "default 10m: how long a surge replica may wait for room and\n"
	 "readiness before that node fails); drain (preemptible jobs evicted\n"
	 "through their checkpoints) and wait until the node is empty; run\n"
	 "PATCH_CMD with /bin/sh (KILN_NODE and KILN_POOL in its\n"
	 "environment); run the health checks; uncordon. It stops at the\n"
	 "first node whose command fails, whose health checks fail (leaving\n"
	 "it drained) or whose surge replica times out (leaving it\n"
	 "cordoned), and says which.\n"
	 "The CLI follows the progress until the end (exit 1 when it stopped)\n"
	 "unless --no-wait. See docs/capacity.md.\n",
	 false},
	{"cordon", cmd_cordon, NULL, "stop new work on a node",
	 "usage: kiln cordon NODE [--reason TEXT]\n"
	 "\n"
	 "Mark NODE cordoned: running work continues, nothing new is placed.\n"
	 "Operators and admins.\n",
	 false},
	{"uncordon", cmd_uncordon, NULL, "make a cordoned or drained node ready",
	 "usage: kiln uncordon NODE\n"
	 "\n"
	 "Mark NODE ready for new work again. Operators and admins.\n",
	 false},
	{"nodes", cmd_nodes, NULL, "list nodes and their devices",
	 "usage: kiln nodes [-w] [-o table|json|yaml|name]\n"
	 "\n"
	 "List each node (name, state, CPUs, memory, labels, taints; whether\n"
	 "its devices are simulated; its GPU fragmentation, FGD's measure\n"
	 "against the server's GPU jobs) and its devices: INDEX MODEL MEMORY\n"
	 "and what is ALLOCATED on each (\"1.0 GPU: job 7 rank 0\").\n"
	 "\n"
	 "  -w, --watch   draw again whenever the server's event stream says\n"
	 "                something changed (no polling); until interrupted\n"
	 "  -o json|yaml  print the server's answer instead\n",
	 false},
	{"pools", cmd_pools, NULL, "list node pools and autoscaling decisions",
	 "usage: kiln pools [-w] [-o table|json|yaml|name]\n"
	 "\n"
	 "List each node pool (kiln server --pool): its VM size, GPUs, pricing,\n"
	 "zones and price per GPU-hour from the catalog; nodes up, provisioning\n"
	 "and desired against min and max; the autoscaler's last decision and\n"
	 "why, and the provider's last failure; each node with its state and\n"
	 "how long it has been idle. A queued job that no pool can hold is\n"
	 "named under blocked.\n"
	 "\n"
	 "  -w, --watch   draw again whenever the server's event stream says\n"
	 "                something changed (no polling); until interrupted\n"
	 "  -o json|yaml  print the server's answer instead\n",
	 false},
	{"token", cmd_token, NULL, "create, list and revoke API tokens",
	 "usage: kiln token create --name NAME --role ROLE\n"
	 "       kiln token ls [-o json|table]\n"
	 "       kiln token revoke NAME\n"
	 "\n"
	 "Manage API tokens (admins only). Roles: viewer (read), user (+ submit\n"
	 "and cancel own jobs), operator (+ cancel any job, node operations),\n"
	 "admin (+ tokens).\n"
	 "\n"
	 "  create  make a token; its secret is printed alone on standard\n"
	 "          output, once: the server keeps only a hash\n"
	 "  ls      list tokens: NAME ROLE CREATED_BY CREATED LAST_USED REVOKED\n"
	 "  revoke  revoke the token named NAME; it stops working at once\n",
	 false},
	{"deploy", cmd_deploy, NULL,
	 "create or update a deployment (replicas of a model server)",
	 "usage: kiln deploy FILE [-o json]\n"
	 "\n"
	 "Send the deployment spec in FILE (kind: Deployment; - reads standard\n"
	 "input) to the server. A new name creates the deployment; an existing\n"
	 "one is updated: a changed spec reaches its replicas one at a time,\n"
	 "a changed replica count at once. Each replica is a job that restarts\n"
	 "with backoff whenever it exits; it gets KILN_PORT (serve there, on\n"
	 "127.0.0.1) and KILN_MODEL_DIR. Under a server with --executor\n"
	 "kubernetes it is an apps/v1 Deployment and a Service instead, which\n"
	 "Kubernetes rolls out (docs/kubernetes.md). A spec's revalidate:\n"
	 "section sets the re-validation of the registry alias it serves; a\n"
	 "job file it names (relative to FILE) is read here and sent with the\n"
	 "spec. See docs/deployments.md.\n"
	 "\n"
	 "  -o json  print the server's answer as JSON\n",
	 false},
	{"deployments", cmd_deployments, NULL,
	 "list deployments, or show one with its replicas",
	 "usage: kiln deployments [NAME] [-w] [-o table|wide|json|yaml|name]\n"
	 "\n"
	 "Without NAME: NAME READY (ready/wanted) MODEL OWNER FALLBACK\n"
	 "GENERATION. With NAME: the deployment and each replica's STATE\n"
	 "(pending, queued, restarting, starting, ready, stopping), ADDRESS,\n"
	 "NODE, ZONE, RESTARTS, JOB and REASON. Under a server with\n"
	 "--executor kubernetes: the Deployment, its Service's cluster DNS\n"
	 "name, its ready/updated/available counts and rollout state (pending,\n"
	 "progressing, complete, failed) with the API's reason, the last API\n"
	 "error, and each pod's STATE, POD, NODE, ZONE, RESTARTS and REASON.\n"
	 "\n"
	 "  -w, --watch   draw again whenever the server's event stream says\n"
	 "                something changed (no polling); until interrupted\n"
	 "  -o name       the names alone\n",
	 false},
	{"scale", cmd_scale, NULL, "set a deployment's number of replicas",
	 "usage: kiln scale NAME N\n"
	 "\n"
	 "Run N replicas (0..64) of deployment NAME: new ones start at once,\n"
	 "the highest-numbered ones stop when scaling down. Under --executor\n"
	 "kubernetes: a merge PATCH of the Deployment's spec.replicas.\n",
	 false},
	{"undeploy", cmd_undeploy, NULL, "delete a deployment and stop its replicas",
	 "usage: kiln undeploy NAME\n"
	 "\n"
	 "Delete deployment NAME: its replica jobs are cancelled (SIGTERM, then\n"
	 "SIGKILL after the kill grace) and the gateway stops routing to it.\n"
	 "Under --executor kubernetes: its Deployment and Service are deleted.\n",
	 false},
	{"rollout", cmd_rollout, NULL, "restart a deployment one replica at a time",
	 "usage: kiln rollout restart NAME\n"
	 "\n"
	 "Replace each replica of deployment NAME with a new one, in order,\n"
	 "starting the next only once the new one is ready, so the others\n"
	 "keep serving (a one-replica deployment has a gap). Under\n"
	 "--executor kubernetes it is what kubectl rollout restart does: the\n"
	 "Deployment's pod template gets the annotation\n"
	 "kubectl.kubernetes.io/restartedAt, and Kubernetes rolls it out.\n",
	 false},
	{"key", cmd_key, NULL, "create, list and revoke gateway keys",
	 "usage: kiln key create --name NAME --deployments A[,B...] [--rpm N]\n"
	 "                       [--tpm N] [--quota-day N] [--quota-month N]\n"
	 "       kiln key ls [-o json|table]\n"
	 "       kiln key revoke NAME\n"
	 "\n"
	 "Manage the keys `kiln gateway` accepts (operators and admins). A key\n"
	 "reaches only the deployments it names; 0 or no flag means no limit.\n"
	 "\n"
	 "  create  make a key (kgw_...); its secret is printed alone on\n"
	 "          standard output, once: the server keeps only its sha256\n"
	 "          --rpm N          requests per minute\n"
	 "          --tpm N          tokens per minute\n"
	 "          --quota-day N    tokens per day\n"
	 "          --quota-month N  tokens per month\n"
	 "  ls      list active keys: NAME DEPLOYMENTS RPM TPM QUOTA_DAY\n"
	 "          QUOTA_MONTH CREATED_BY CREATED\n"
	 "  revoke  revoke the key named NAME\n",
	 false},
	{"model", cmd_model, NULL,
	 "push, sign, verify, pull and promote model versions",
	 "usage: kiln model push DIR --name NAME [--alias ALIAS] [--http]\n"
	 "       kiln model push --from-job JOB --name NAME [--alias ALIAS]\n"
	 "       kiln model ls\n"
	 "       kiln model show NAME[@VERSION|@ALIAS]\n"
	 "       kiln model pull NAME@VERSION|NAME@ALIAS DIR\n"
	 "       kiln model diff NAME@V1 NAME@V2\n"
	 "       kiln model promote NAME@VERSION ALIAS\n"
	 "       kiln model rollback NAME ALIAS\n"
	 "       kiln model aliases NAME\n"
	 "       kiln model keygen --out FILE\n"
	 "       kiln model sign NAME@VERSION --key FILE\n"
	 "       kiln model verify NAME@VERSION|NAME@ALIAS\n"
	 "       kiln model revalidate NAME --alias ALIAS --job FILE --every DUR\n"
	 "                 --max METRIC=N [--min METRIC=N] ... [--rollback]\n"
	 "       kiln model revalidate NAME --alias ALIAS --now\n"
	 "       kiln model revalidate NAME\n"
	 "       kiln model lineage NAME@VERSION|NAME@ALIAS\n"
	 "\n"
	 "The model registry (docs/registry.md): versions NAME@1, NAME@2, ...\n"
	 "are immutable; files are stored once by sha256 in the server's blob\n"
	 "store. Wherever a version is wanted, an alias (NAME@prod) does too.\n"
	 "\n"
	 "  push      upload DIR's files, each read once and hashed as it is\n"
	 "            sent; a file pushed before unchanged (its digest kept in\n"
	 "            $XDG_CACHE_HOME/kiln/digests) is sent only if the server\n"
	 "            lacks its blob; create the next version; prints\n"
	 "            NAME@VERSION. --alias points ALIAS at it. On the\n"
	 "            server's machine files go by open descriptor (no copy\n"
	 "            here); --http sends them over HTTP anyway. With\n"
	 "            --from-job, the version is the succeeded job's outputs\n"
	 "            (already in the store; nothing is uploaded), with its\n"
	 "            lineage and the metrics of its metrics.json\n"
	 "  ls        models: NAME VERSIONS LATEST ALIASES UPDATED\n"
	 "  show      a model's versions and aliases, or one version's files,\n"
	 "            digests, signatures and aliases\n"
	 "  pull      download a version into the new directory DIR, checking\n"
	 "            every digest as it is written; refuses (and leaves no\n"
	 "            DIR) what verify refuses\n"
	 "  diff      files added, removed and changed from V1 to V2\n"
	 "  promote   point ALIAS at a version (operators)\n"
	 "  rollback  move ALIAS back to the version it pointed at before\n"
	 "  aliases   every move of every alias: who, when, from -> to\n"
	 "  keygen    a new Ed25519 key pair: FILE (private, 0600) and\n"
	 "            FILE.pub; prints the key id (sha256 of the public key)\n"
	 "  sign      sign a version's canonical manifest with the private key\n"
	 "            FILE; the server keeps the signature only if it verifies\n"
	 "  verify    check a version: signed by a key in the server's\n"
	 "            --trusted-keys, and every blob in the store hashes to its\n"
	 "            digest (hashed here, in parallel; a file:// store is read\n"
	 "            in place). A failure names the file\n"
	 "  lineage   the chain back to the data: the job that made the\n"
	 "            version, its spec digest, checkpoint and inputs with\n"
	 "            their digests, and the jobs that produced those inputs\n"
	 "  revalidate  run the evaluation job FILE every DUR against the\n"
	 "            version ALIAS names (KILN_MODEL_DIR: its verified copy,\n"
	 "            KILN_MODEL: NAME@VERSION); a metric in its metrics.json\n"
	 "            above a --max or below a --min (or missing) fires\n"
	 "            model_revalidation_failed until a run passes, and with\n"
	 "            --rollback rolls ALIAS back. --now runs it at once and\n"
	 "            prints the job id (operators). show NAME@V lists runs.\n"
	 "            NAME alone lists its re-validations: ALIAS EVERY\n"
	 "            THRESHOLDS ROLLBACK SOURCE (deployment D when a\n"
	 "            deployment's revalidate: set it, else by hand (USER))\n"
	 "\n"
	 "pull and verify read the server's blob store directly: file:// on\n"
	 "this machine, or Azure with credentials from AZURE_STORAGE_*.\n"
	 "Exit status: 0 ok, 1 refused or failed, 2 usage.\n",
	 false},
	{"workflow", cmd_workflow, NULL,
	 "run a workflow file's steps as jobs; list, show, retry, cancel runs",
	 "usage: kiln workflow run FILE [--wait]\n"
	 "       kiln workflow ls [-o json|table]\n"
	 "       kiln workflow show RUN [-w] [-o json|yaml|table]\n"
	 "       kiln workflow retry RUN\n"
	 "       kiln workflow cancel RUN\n"
	 "\n"
	 "Run a `kind: Workflow` file (docs/workflows.md): each step is a job,\n"
	 "started when the steps it needs have succeeded, with its on_failure\n"
	 "policy, retries and `when:` conditions.\n"
	 "\n"
	 "  run     send FILE, the job files it names (read beside it), its\n"
	 "          sha256 and the git revision of its directory; print the\n"
	 "          run's id\n"
	 "          --wait  follow the run until it ends; exit 0 only when it\n"
	 "                  succeeded (4 failed, 5 cancelled)\n"
	 "  ls      list runs: ID NAME STATE STEPS (succeeded/all) OWNER\n"
	 "          SUBMITTED RAN REASON\n"
	 "  show    a run, its cost and its steps: STEP STATE NEEDS DURATION\n"
	 "          ATTEMPTS JOBS (every job it ran, retries' too) COST (of\n"
	 "          those jobs' GPU time as `kiln cost --by job` prices it,\n"
	 "          lost work included; - for register and deploy) REASON;\n"
	 "          -w, --watch draws it again on each change (the server's\n"
	 "          event stream, no polling)\n"
	 "  retry   run a failed or cancelled run again: its failed,\n"
	 "          cancelled and thereby skipped steps only; succeeded\n"
	 "          steps and their outputs are kept\n"
	 "  cancel  cancel a run: its running step jobs are cancelled\n",
	 false},
	{"alerts", cmd_alerts, NULL, "list firing and recently resolved alerts",
	 "usage: kiln alerts [--all] [-w] [-o table|wide|json|yaml]\n"
	 "\n"
	 "List the alerts the server's rules raised: those firing now, then\n"
	 "those resolved in the last day, newest first: STATE SEVERITY RULE\n"
	 "SINCE (fired) RESOLVED SUMMARY. Rules, scraping and the webhook are\n"
	 "set on `kiln server` (--alert-rules, --scrape, --alert-webhook); see\n"
	 "docs/alerts.md.\n"
	 "\n"
	 "  --all         every alert recorded, however long ago it resolved\n"
	 "  -w, --watch   draw again whenever the server's event stream says\n"
	 "                something changed (no polling); until interrupted\n"
	 "  -o json|yaml  print the server's answer instead\n",
	 false},
	{"events", cmd_events, NULL, "print or follow the server's event stream",
	 "usage: kiln events [-f] [--since SEQ]\n"
	 "\n"
	 "Print the server's recent events, one JSON document per line (for\n"
	 "jq): job state changes (job.state), node state changes (node.state)\n"
	 "and alerts (alert.firing, alert.resolved). Each has seq, time_ms and\n"
	 "type. The server keeps the last 1024 in memory; seq starts over when\n"
	 "it restarts. On a terminal, control characters in names are shown\n"
	 "escaped as `kiln logs` does; a pipe gets the JSON unchanged.\n"
	 "\n"
	 "  -f, --follow  keep printing new events as they happen\n"
	 "  --since SEQ   only events after sequence number SEQ\n",
	 false},
	{"audit", cmd_audit, NULL,
	 "list the audit log, newest first; verify its hash chain",
	 "usage: kiln audit [ls] [--actor A] [--action PREFIX] [--since WHEN]\n"
	 "                  [--limit N] [-o json|table]\n"
	 "       kiln audit verify [--home DIR] [-o json]\n"
	 "\n"
	 "kiln audit (or kiln audit ls) lists audit records, newest first:\n"
	 "TIME ACTOR ROLE ACTION OBJECT OUTCOME. Every state-changing call is\n"
	 "recorded (job.submit, job.cancel, token.create, key.create,\n"
	 "backup.create, ...); requests refused for their role as `denied`.\n"
	 "\n"
	 "  --actor A          only records of the token named A\n"
	 "  --action PREFIX    only actions starting with PREFIX (\"job.\")\n"
	 "  --since WHEN       only records since WHEN: a duration back from\n"
	 "                     now (30m, 2d) or a UTC time (2026-12-03T04:00Z)\n"
	 "  --limit N          at most N records\n"
	 "  -o json            print the server's JSON instead\n"
	 "\n"
	 "kiln audit verify (admin) has the server recompute the hash chain\n"
	 "(docs/audit.md) and prints `audit log ok: N rows, head row ID HASH`,\n"
	 "or the first bad row and what is wrong with it (edited, deleted,\n"
	 "reordered, truncated, unchained) and exits 1. With --home DIR it\n"
	 "checks that home's kiln.db, audit.key and audit.head itself, with no\n"
	 "server (a stopped one, or a restored home).\n",
	 false},
	{"backup", cmd_backup, NULL,
	 "back up the server's state to a store; list and restore backups",
	 "usage: kiln backup create [--to STORE-URL] [--with-audit-key]\n"
	 "       kiln backup ls [--from STORE-URL] [-o json|table]\n"
	 "       kiln backup restore BACKUP --home DIR [--from STORE-URL]\n"
	 "\n"
	 "create (admin) has the running server copy kiln.db at one moment\n"
	 "(SQLite's online backup), with the public key files of\n"
	 "$KILN_HOME/keys and a manifest (time, kiln and schema version,\n"
	 "size and sha256 of each part), to STORE/backups/NAME/, NAME being\n"
	 "the UTC time; it waits for the upload and prints NAME. The default\n"
	 "store is the server's --backup-to, else its --blob-store.\n"
	 "  --with-audit-key   include audit.key, without which the restored\n"
	 "                     audit log cannot be verified; the backup is\n"
	 "                     then a secret (docs/backup.md)\n"
	 "\n"
	 "ls lists the complete backups in a store: NAME CREATED KILN SCHEMA\n"
	 "PARTS SIZE AUDIT_KEY. restore rebuilds a kiln home from one into\n"
	 "DIR, which must be empty or missing: every part is downloaded and\n"
	 "checked against the manifest's sha256 first, and a bad part is\n"
	 "named and nothing restored. Secrets and kiln.db are written 0600.\n"
	 "Without a server, give the store with --from (Azure credentials\n"
	 "from AZURE_STORAGE_*, as kiln blob).\n",
	 false},
	{"validate", cmd_validate, NULL,
	 "check a job, deployment or workflow spec, without a server",
	 "usage: kiln validate FILE [-o json]\n"
	 "\n"
	 "Parse and check the job spec (kind: Job), deployment spec (kind:\n"
	 "Deployment, with the shipped model presets) or workflow (kind:\n"
	 "Workflow, with each step's job file, found beside FILE) in FILE\n"
	 "(- reads standard input) the way the server would, without one.\n"
	 "Prints `FILE: ok (...)` (for a workflow, its steps in an order they\n"
	 "can run in), or the problem as FILE:LINE:COLUMN: FIELD: message\n"
	 "and exits 1 (a step's job with its own inputs: too, as the server\n"
	 "refuses it).\n"
	 "\n"
	 "  -o json  print the normalized spec (defaults filled in) as JSON\n",
	 false},
	{"sim", cmd_sim, NULL, "replay a GPU trace: packing policies, or autoscaled pools",
	 "usage: kiln sim --nodes NODES.csv --pods PODS.csv [--policy P[,P...]]\n"
	 "                [--seeds 42-51] [--baseline P] [--csv FILE]\n"
	 "                [--plot FILE.png]\n"
	 "       kiln sim --nodes NODES.csv --pods PODS.csv --departures\n"
	 "                [--load F] [--policy ...] [--seeds ...] [--csv FILE]\n"
	 "       kiln sim --from-history [--nodes NODES.csv] [--save-trace DIR]\n"
	 "                [--policy ...] [--seeds ...] [--csv ...] [--plot ...]\n"
	 "       kiln sim --autoscale POOLS (--pods PODS.csv | --from-history)\n"
	 "                [--provision-delay 3m] [--policy P] [-o json]\n"
	 "\n"
	 "Replay an openb-format trace (Alibaba cluster-trace-gpu-v2023) the\n"
	 "way the FGD paper measures GPU packing: pods arrive in random order,\n"
	 "never leave, and are resampled up to 130 % of the GPU capacity. For\n"
	 "each policy print the mean and standard deviation over the seeds of\n"
	 "the unallocated GPU and of the fragmentation at 90, 95, 100, 110 and\n"
	 "130 % arrived (the median as an extra), every policy against the\n"
	 "baseline seed by seed (mean difference, t, seeds better and worse),\n"
	 "and pods placed per second. Runs no server, except that\n"
	 "--from-history reads the server's ended jobs (one pod per task) and,\n"
	 "without --nodes, its nodes as the trace. See docs/scheduling.md.\n"
	 "\n"
	 "  --nodes FILE     node list: sn,cpu_milli,memory_mib,gpu,model\n"
	 "  --pods FILE      pod list: name,cpu_milli,memory_mib,num_gpu,\n"
	 "                   gpu_milli; optional gpu_spec (default: any model),\n"
	 "                   creation_time, deletion_time, scheduled_time\n"
	 "                   (--departures); other columns ignored\n"
	 "  --policy LIST    comma-separated: random, dot-product,\n"
	 "                   gpu-clustering, gpu-packing, best-fit, fgd, kiln\n"
	 "                   (default: all)\n"
	 "  --seeds LIST     seeds such as 42-51 (default) or 1,2,7\n"
	 "  --baseline P     compare the others with P, paired by seed\n"
	 "                   (default: fgd when it runs)\n"
	 "  --csv FILE       write every policy's curves (per arrived %), or\n"
	 "                   with --departures one row per policy and seed\n"
	 "  --plot FILE.png  draw the means with gnuplot, like the paper's\n"
	 "                   Fig. 9a\n"
	 "  --departures     replay in time instead: pods arrive at\n"
	 "                   creation_time, queue, run their recorded time and\n"
	 "                   leave; prints GPU pods' queueing delay p50/p99,\n"
	 "                   pods never placed and GPU-hours stranded\n"
	 "  --load F         with --departures: arrivals F times as dense as\n"
	 "                   recorded (default 1)\n"
	 "  --from-history   the pods are the server's ended jobs (MIG jobs\n"
	 "                   left out: openb has no MIG slices)\n"
	 "  --save-trace DIR keep the history's pods.csv (and nodes.csv) there\n"
	 "\n"
	 "With --autoscale the pods arrive at creation_time and run until\n"
	 "deletion_time (less scheduled_time's wait), through node pools that\n"
	 "the server's autoscaler grows and shrinks, and again through the same\n"
	 "pools fixed at their max; per pool and in total it prints node-hours,\n"
	 "cost (the catalog's price for the SKU, spot or on demand), GPU\n"
	 "utilisation, queue wait p50/p95/max and peak nodes.\n"
	 "\n"
	 "  --autoscale POOLS  pools as kiln server --pool writes them, joined\n"
	 "                     by ';' (\"a100 Standard_NC24ads_A100_v4\n"
	 "                     1xA100-80GB min=0 max=8; ...\"), or @FILE with one\n"
	 "                     a line (# comments); provider=sim only, as a\n"
	 "                     replay makes its nodes itself\n"
	 "  --provision-delay D  from asking for a node to its being up\n"
	 "                     (default 0s)\n"
	 "  --policy P         one packing policy (default: kiln, as the\n"
	 "                     server's)\n",
	 false},
	{"render", cmd_render, NULL,
	 "print the Kubernetes manifests of a job or deployment spec",
	 "usage: kiln render FILE --executor kubernetes [--image IMAGE]\n"
	 "                   [-n NAMESPACE] [--scheduler-name NAME]\n"
	 "                   [--shim-image IMAGE] [--store URL]\n"
	 "                   [--gpu-products FILE] [-o yaml|json]\n"
	 "\n"
	 "Print what the job spec (kind: Job) or deployment spec (kind:\n"
	 "Deployment) in FILE (- reads standard input) becomes on Kubernetes,\n"
	 "for kubectl apply -f: a batch/v1 Job (Indexed, with a headless\n"
	 "Service for rank 0, when tasks > 1) or an apps/v1 Deployment and its\n"
	 "Service. GPUs become nvidia.com/gpu or nvidia.com/mig-PROFILE limits\n"
	 "with the AKS GPU taint toleration, GPU models a node affinity on\n"
	 "nvidia.com/gpu.product, preemptible the AKS spot toleration, the\n"
	 "checkpoint grace a preStop hook and terminationGracePeriodSeconds.\n"
	 "A job's task runs under `kiln shim --kube` (checkpoint restore and\n"
	 "sync, the checkpoint signal), kiln copied in by an initContainer.\n"
	 "A GPU share is an annotation that only `kiln kube-scheduler` reads.\n"
	 "A job's inputs: reach the pod's shim as KILN_INPUTS; a file only\n"
	 "the server sees is refused, as the server under --executor\n"
	 "kubernetes refuses it.\n"
	 "Needs no server and no cluster. See docs/kubernetes.md.\n"
	 "\n"
	 "  --executor kubernetes  the engine to render for (the only one)\n"
	 "  --image IMAGE          the container image (default: a job spec's\n"
	 "                         image; deployments need this flag)\n"
	 "  -n, --namespace NS     write metadata.namespace\n"
	 "  --scheduler-name NAME  schedulerName of every pod (default: kiln\n"
	 "                         for GPU shares only, else the default\n"
	 "                         scheduler)\n"
	 "  --shim-image IMAGE     the initContainer's image, which has kiln\n"
	 "                         (default: the task's image)\n"
	 "  --store URL            the store of jobs whose spec names none:\n"
	 "                         their outputs' (KILN_OUTPUT_STORE) and, if\n"
	 "                         preemptible or with a checkpoint section,\n"
	 "                         their checkpoints' (KILN_STORE)\n"
	 "  --gpu-products FILE    GPU model to nvidia.com/gpu.product table\n"
	 "                         (default kiln's gpu-products.csv: see\n"
	 "                         KILN_DATA_DIR in kiln(1))\n"
	 "  -o yaml|json           YAML documents (default) or a JSON array\n",
	 false},
	{"kube-scheduler", cmd_kube_scheduler, NULL,
	 "place pods on Kubernetes with kiln's packing policies",
	 "usage: kiln kube-scheduler [--kubeconfig FILE] [--context NAME]\n"
	 "                           [--policy NAME] [--scheduler-name NAME]\n"
	 "                           [--gpu-products FILE]\n"
	 "                           [--service-account-dir DIR]\n"
	 "                           [--watch-timeout SECONDS] [--debug]\n"
	 "\n"
	 "A secondary Kubernetes scheduler: list nodes and pods, watch pods,\n"
	 "and bind each pending pod whose spec.schedulerName is NAME to the\n"
	 "node the packing policy picks (GPU shares from the kiln.dev/gpu-milli\n"
	 "annotation go to a GPU, written back as kiln.dev/gpu). Runs until\n"
	 "SIGTERM or SIGINT. Needs RBAC: pods get/list/watch, pods/binding\n"
	 "create, nodes get/list/watch (docs/kubernetes.md).\n"
	 "\n"
	 "  --kubeconfig FILE      credentials from a kubeconfig (default the\n"
	 "                         first file in $KUBECONFIG; else the pod's\n"
	 "                         service account)\n"
	 "  --context NAME         the kubeconfig context (default its\n"
	 "                         current-context)\n"
	 "  --policy NAME          random, dot-product, gpu-clustering,\n"
	 "                         gpu-packing, best-fit, fgd or kiln (default)\n"
	 "  --scheduler-name NAME  the schedulerName to serve (default kiln)\n"
	 "  --gpu-products FILE    as for kiln render\n"
	 "  --service-account-dir DIR  token and ca.crt in a cluster (default\n"
	 "                         /var/run/secrets/kubernetes.io/serviceaccount)\n"
	 "  --watch-timeout SECONDS  how long the API keeps one watch open;\n"
	 "                         nodes are listed again between watches\n"
	 "                         (default 300)\n"
	 "  --debug                log debug messages\n"
	 "\n"
	 "Exit status: 0 after SIGTERM or SIGINT, 1 when credentials or the\n"
	 "product table cannot be read, 2 on a usage error.\n",
	 false},
	{"exporter", cmd_exporter, NULL,
	 "serve this node's metrics for Prometheus",
	 "usage: kiln exporter [--config FILE] [--print-config]\n"
	 "                     [--listen HOST:PORT] [--root DIR]\n"
	 "                     [--token-file FILE] [--mount LIST]\n"
	 "                     [--hostname NAME]\n"
	 "                     [--tls-cert FILE --tls-key FILE\n"
	 "                      [--tls-client-ca FILE]] [--insecure]\n"
	 "\n"
	 "Serve GET /metrics in Prometheus text format: CPU, memory, network,\n"
	 "disk and filesystem metrics under node_exporter's names, and per-GPU\n"
	 "metrics from NVML under dcgm-exporter's names (DCGM_FI_DEV_*), so\n"
	 "their Grafana dashboards work unchanged. Stops on SIGTERM or SIGINT.\n"
	 "\n"
	 "  --config FILE       read flags from FILE (YAML): each key a long\n"
	 "                      flag's name (mount: /,/data), the TLS ones\n"
	 "                      also as tls: {cert, key, client_ca}; flags on\n"
	 "                      the command line win\n"
	 "  --print-config      print every key's value in effect (flag over\n"
	 "                      file over default) and where it came from, and\n"
	 "                      exit\n"
	 "  --listen HOST:PORT  address (default 127.0.0.1:9470; port 0 picks\n"
	 "                      a free one, printed on standard error)\n"
	 "  --root DIR          read proc/ and sys/ under DIR (default /)\n"
	 "  --token-file FILE   require `Authorization: Bearer <token>` with\n"
	 "                      the token in FILE; without it scrapes are not\n"
	 "                      authenticated, as exporters conventionally\n"
	 "                      are, so keep the default loopback address\n"
	 "  --mount LIST        only these mount points, comma-separated\n"
	 "                      (default: every real filesystem)\n"
	 "  --hostname NAME     the Hostname label of GPU series (default:\n"
	 "                      this host's name)\n"
	 "  --tls-cert FILE     serve HTTPS with this certificate chain (PEM),\n"
	 "  --tls-key FILE      and its key; both reloaded on SIGHUP and when\n"
	 "                      the files change (docs/tls.md)\n"
	 "  --tls-client-ca FILE  scrapers must show a client certificate\n"
	 "                      that chains to a CA in FILE\n"
	 "  --insecure          allow plain HTTP on a non-loopback address\n",
	 false},
	{"gateway", cmd_gateway, NULL,
	 "serve deployments behind one OpenAI-compatible endpoint",
	 "usage: kiln gateway [--config FILE] [--print-config]\n"
	 "                    [--listen HOST:PORT] [--workers N]\n"
	 "                    [--zone Z]\n"
	 "                    [--routes FILE | --server URL --token TOKEN]\n"
	 "                    [--refresh DURATION] [--access-log FILE]\n"
	 "                    [--home DIR] [--max-body SIZE]\n"
	 "                    [--max-header-size SIZE] [--head-timeout DURATION]\n"
	 "                    [--body-timeout DURATION] [--max-connections N]\n"
	 "                    [--max-connections-per-client N]\n"
	 "                    [--upstream-timeout DURATION]\n"
	 "                    [--breaker-failures N] [--breaker-cooldown DURATION]\n"
	 "                    [--anomaly-window DURATION]\n"
	 "                    [--tls-cert FILE --tls-key FILE] [--insecure]\n"
	 "\n"
	 "Serve /v1/chat/completions, /v1/completions and /v1/embeddings,\n"
	 "routed by the body's \"model\" (a deployment's name), and /v1/models,\n"
	 "for callers with a key (Authorization: Bearer KEY); GET /metrics\n"
	 "(Prometheus, with a key too). Per-key and per-deployment rate limits and\n"
	 "daily/monthly token quotas (429 with Retry-After), least-outstanding\n"
	 "balancing over ready replicas (this zone first), one retry on another\n"
	 "replica, circuit breakers, and the deployment's fallback when no\n"
	 "replica is healthy (x-kiln-fallback header). Streams pass through as\n"
	 "they arrive. One JSON access-log line per request. Counters are kept\n"
	 "in $KILN_HOME/gateway/counters.json and survive a restart. Stops on\n"
	 "SIGTERM or SIGINT. A deployment's latency, error rate, output length\n"
	 "and x-kiln-score that leave their learned band (EWMA +- 4 MADs) for 3\n"
	 "windows raise one alert, resolved when the signal is back: logged,\n"
	 "and sent to the server (kiln alerts, its event stream and webhook).\n"
	 "\n"
	 "  --config FILE        read flags from FILE (YAML): each key a long\n"
	 "                       flag's name (workers: 4, zone: a, server:,\n"
	 "                       token:), the TLS ones also as tls: {cert,\n"
	 "                       key}; flags on the command line win\n"
	 "  --print-config       print every key's value in effect (flag over\n"
	 "                       file over default) and where it came from, a\n"
	 "                       token's value left out, and exit\n"
	 "  --listen HOST:PORT   address (default 127.0.0.1:7080; port 0 picks\n"
	 "                       a free one); the URL is written to\n"
	 "                       $KILN_HOME/gateway/gateway.url once listening\n"
	 "  --workers N          threads, each with its own listener on the\n"
	 "                       same port (SO_REUSEPORT) (default 1)\n"
	 "  --zone Z             this gateway's zone: its replicas come first\n"
	 "  --routes FILE        a static route table (the document of the\n"
	 "                       server's GET /v1/gateway/config); no server\n"
	 "  --server URL, --token TOKEN  the server to poll for routes and keys\n"
	 "                       (default as every command: KILN_SERVER and\n"
	 "                       KILN_TOKEN, else $KILN_HOME/server.url and\n"
	 "                       admin.token). The last good table is kept in\n"
	 "                       $KILN_HOME/gateway/routes.json and served\n"
	 "                       while the server cannot be reached\n"
	 "  --refresh DURATION   how often to poll the server (default 1s; a\n"
	 "                       bare number is seconds)\n"
	 "  --access-log FILE    append the access log to FILE (default stderr)\n"
	 "  --home DIR           state directory (default $KILN_HOME, else\n"
	 "                       ~/.kiln)\n"
	 "  --max-body SIZE      largest request body (default 1Mi; else 413)\n"
	 "  --max-header-size SIZE  largest request head (default 16Ki; else\n"
	 "                       431)\n"
	 "  --head-timeout DURATION  a request head must come whole within\n"
	 "                       this, else the connection is closed (default\n"
	 "                       10s)\n"
	 "  --body-timeout DURATION  the longest gap between a request body's\n"
	 "                       bytes, else the connection is closed (default\n"
	 "                       30s)\n"
	 "  --max-connections N  open connections a worker holds; more get 503\n"
	 "                       and are closed (default 4096)\n"
	 "  --max-connections-per-client N  the same for one client address\n"
	 "                       (default 256)\n"
	 "  --upstream-timeout DURATION  longest wait for a model server to\n"
	 "                       send anything (default 300s; else 504)\n"
	 "  --breaker-failures N consecutive failures that open a replica's\n"
	 "                       circuit breaker (default 3)\n"
	 "  --breaker-cooldown DURATION  how long an open breaker waits before\n"
	 "                       one trial request (default 5s)\n"
	 "  --anomaly-window DURATION  the window a deployment's signals are\n"
	 "                       averaged over for anomaly detection; the band\n"
	 "                       is learned from the first 10 (default 10s)\n"
	 "  --tls-cert FILE, --tls-key FILE  serve HTTPS with this certificate\n"
	 "                       chain and key (PEM), reloaded on SIGHUP and\n"
	 "                       when the files change\n"
	 "  --insecure           allow plain HTTP on a non-loopback address\n"
	 "                       (refused by default: keys and prompts would\n"
	 "                       cross in clear)\n"
	 "An https:// server is verified against the system's CAs or $KILN_CA;\n"
	 "$KILN_CLIENT_CERT and $KILN_CLIENT_KEY give the gateway a client\n"
	 "certificate for it (docs/tls.md).\n"
	 "\n"
	 "Exit status: 0 after a clean stop, 1 when start-up failed, 2 on a\n"
	 "usage error, 3 when no server is given or found (and no --routes).\n",
	 false},
	{"health", cmd_health, NULL, "check this node's GPUs, memory, links and disks",
	 "usage: kiln health [--json] [--drain] [--root DIR] [--sku SIZE]\n"
	 "                   [--sku-file FILE] [--dir LIST] [--min-free SIZE]\n"
	 "                   [--kernel-log FILE] [--node-name NAME]\n"
	 "                   [--perf] [--perf-fraction F] [--perf-file FILE]\n"
	 "\n"
	 "Run the node checks: GPU count and model against the VM size, GPU\n"
	 "double-bit ECC, pending page retirement and row-remap failures, clock\n"
	 "throttling, PCIe links below capability, NVLinks down, NVIDIA XIDs and\n"
	 "machine checks in the kernel log (and EDAC), InfiniBand ports not\n"
	 "Active or slower than the VM size's, memory below the VM size's, and\n"
	 "free space. Output follows LBNL NHC, so it can be Slurm's\n"
	 "HealthCheckProgram: nothing and exit 0 when healthy, else one line\n"
	 "per failed check (ERROR:  kiln:  Health check failed:  CHECK: why)\n"
	 "and exit 1.\n"
	 "\n"
	 "  --json            every check with pass, fail or skip and why\n"
	 "  --drain           report to the kiln server (healthy or not), and\n"
	 "                    drain the node in Slurm when scontrol is on PATH\n"
	 "  --root DIR        read proc/, sys/ and dev/kmsg under DIR\n"
	 "  --sku SIZE        the Azure VM size (default $KILN_SKU), e.g.\n"
	 "                    Standard_ND96isr_H100_v5\n"
	 "  --sku-file FILE   the catalogue (default kiln's azure-gpu-skus.csv)\n"
	 "  --dir LIST        scratch and checkpoint directories, comma-separated\n"
	 "  --min-free SIZE   free space each --dir needs (default 10Gi)\n"
	 "  --kernel-log FILE read the kernel log here (default /dev/kmsg)\n"
	 "  --node-name NAME  this node's name for --drain (default: short\n"
	 "                    host name)\n"
	 "  --perf            also measure each GPU's memory bandwidth and bf16\n"
	 "                    GEMM throughput through CUDA (seconds per GPU,\n"
	 "                    which it occupies): checks gpu_mem_bandwidth and\n"
	 "                    gpu_gemm, skipped without CUDA or a GPU\n"
	 "  --perf-fraction F fail a GPU below F of its model's figure\n"
	 "                    (default 0.7)\n"
	 "  --perf-file FILE  the figures (default kiln's gpu-perf.csv)\n"
	 "\n"
	 "Exit status: 0 healthy, 1 a check failed, 2 usage error, 3 --drain\n"
	 "could not reach the server.\n",
	 false},
	{"advise", cmd_advise, NULL, "say which VM to rent for a job and what it costs",
	 "usage: kiln advise --phase train|finetune|infer\n"
	 "                   (--params N [--dtype T] | --preset NAME)\n"
	 "                   [--workload generative|complex|small]\n"
	 "                   [--nodes N | --throughput TOKENS/S]\n"
	 "                   [--interruptible] [--checkpoints] [--budget USD]\n"
	 "                   [--context N] [--batch N] [--layers N --hidden N]\n"
	 "                   [--catalog FILE] [--options N] [-o json]\n"
	 "\n"
	 "Name the VM family Azure's compute recommendations give for the phase\n"
	 "and workload (training: ND, or NC with Ethernet; RDMA/InfiniBand for\n"
	 "multi-node training; inference: NC or ND; small models: E-series CPU\n"
	 "for training, F-series for inference), the memory the model needs\n"
	 "(weights; training adds 16 bytes/param for gradients and Adam state\n"
	 "plus 20% for activations; inference adds the KV cache plus 10%), and\n"
	 "the cheapest sizes that hold it, with the GPUs used and the cost per\n"
	 "hour and per month (730 h) on demand, on spot and reserved for 1 and 3\n"
	 "years (\"—\" where the catalog has no price). Warnings go to stderr.\n"
	 "Needs no server. docs/cost.md has the arithmetic.\n"
	 "\n"
	 "  --phase P         train, finetune or infer\n"
	 "  --workload W      generative (default), complex (non-generative) or\n"
	 "                    small (non-generative, on CPU)\n"
	 "  --params N        parameters: 7B, 350M, 1.5T or a plain count\n"
	 "  --dtype T         fp32, bf16 (default), fp16, fp8, int8, int4\n"
	 "  --preset NAME     a model of kiln's model-presets.csv (its\n"
	 "                    parameters and dtype)\n"
	 "  --nodes N         VMs: training shares the memory over them,\n"
	 "                    inference runs N replicas (default 1)\n"
	 "  --throughput T    decode tokens/s wanted (infer): VMs are added until\n"
	 "                    50% of the GPUs' memory bandwidth reaches it\n"
	 "  --interruptible   the job may run on spot VMs (ranked by spot price)\n"
	 "  --checkpoints     the job checkpoints (spot training without it warns)\n"
	 "  --budget USD      monthly budget; sizes above it are flagged\n"
	 "  --context N       tokens of context for the KV cache (default 4096)\n"
	 "  --batch N         concurrent sequences for the KV cache (default 1)\n"
	 "  --layers N, --hidden N  the model's shape (default: estimated from\n"
	 "                    the parameters as hidden = 128 x layers)\n"
	 "  --catalog FILE    more sizes or prices, same columns as\n"
	 "                    kiln's azure-gpu-skus.csv; rows replace by size\n"
	 "                    name\n"
	 "  --options N       how many sizes to list (default 5, at most 32)\n"
	 "\n"
	 "Exit status: 0 with advice, 1 when no size fits or a file is bad, 2 on\n"
	 "a usage error.\n",
	 false},
	{"cost", cmd_cost, NULL, "what GPU time cost: by job, user, deployment, node or day",
	 "usage: kiln cost [--by job|user|deployment|node|day]\n"
	 "                 [--since DURATION|TIME] [--until DURATION|TIME]\n"
	 "                 [-o table|json|csv] [--chart FILE.svg]\n"
	 "       kiln cost --reservations [--since ...] [--until ...] [-o json]\n"
	 "       kiln cost --rightsize [--since ...] [-o table|json|csv]\n"
	 "\n"
	 "The cost ledger (docs/cost.md): each node's GPU time, priced by its\n"
	 "size and pricing model (labels sku= and pricing=, `kiln server\n"
	 "--node-sku`), split into busy (allocated to a task: whole GPUs, GPU\n"
	 "shares and MIG slices by their fraction), idle (not allocated while\n"
	 "the node is up) and unhealthy; lost is busy time of a preempted or\n"
	 "failed attempt after its last checkpoint (all of it without one).\n"
	 "Columns: GPU-HOURS busy, COST busy, IDLE, UNHEALTHY, LOST (part of\n"
	 "COST), TOTAL (busy + idle + unhealthy), GOODPUT (useful over busy)\n"
	 "and EFFICIENCY (used over requested from per-task samples: GPU\n"
	 "utilisation x share over GPU time held, CPU cores and resident\n"
	 "memory over requested; the mean of those a row has, \"-\" when none\n"
	 "was sampled; `kiln server --usage-interval`). The\n"
	 "last row is the total; by job, user or deployment idle and\n"
	 "unhealthy time belong to no row and are in the total only. A node\n"
	 "whose size or price the catalog lacks is costed at $0 and marked *.\n"
	 "\n"
	 "  --by KEY              job (default), user, deployment, node or day\n"
	 "                        (UTC days)\n"
	 "  --since DURATION|TIME the window's start: 7d ago (default 30d), or\n"
	 "                        a UTC time 2026-12-01 or 2026-12-01T08:00:00Z\n"
	 "  --until DURATION|TIME the window's end (default now)\n"
	 "  -o table|json|csv     json: the server's answer as is; csv: one\n"
	 "                        line per row then the total, unrounded\n"
	 "  --chart FILE.svg      also write cost per day, stacked useful,\n"
	 "                        lost, idle and unhealthy, as an SVG file\n"
	 "  --reservations        advice from the window's history instead:\n"
	 "                        per VM size, its nodes' GPU utilisation (busy\n"
	 "                        over up) against each reserved term's\n"
	 "                        break-even (reserved / on-demand price), and\n"
	 "                        which jobs could move to spot (preemptible,\n"
	 "                        with checkpoints; the longest work an attempt\n"
	 "                        had past its last checkpoint)\n"
	 "  --rightsize           right-size advice instead: per job name\n"
	 "                        (its runs in the window), the samples, p50,\n"
	 "                        p95 and max of CPU, memory and GPU memory use\n"
	 "                        against the request, and a suggested request\n"
	 "                        (p95 x 1.15, rounded up) where that is below\n"
	 "                        70% of it, from at least 10 samples\n",
	 false},
	{"tune", cmd_tune, NULL, "set GPU application clocks to their maximum",
	 "usage: kiln tune gpu [--dry-run] [--reset]\n"
	 "\n"
	 "Set each GPU's application clocks to the highest supported pair and\n"
	 "print the clocks before and after (needs root). Without a GPU, says so\n"
	 "and exits 0.\n"
	 "\n"
	 "  --dry-run  print the plan, change nothing\n"
	 "  --reset    restore the driver's default application clocks\n",
	 false},
	{"blob", cmd_blob, NULL, "list, put, get and delete blobs in a store",
	 "usage: kiln blob ls URL [PREFIX]\n"
	 "       kiln blob put URL NAME FILE [--create-only] [--single-put S]\n"
	 "                     [--parallel N] [--block-size S]\n"
	 "       kiln blob get URL NAME FILE [--offset N] [--length N]\n"
	 "       kiln blob rm URL NAME\n"
	 "       kiln blob stat URL NAME\n"
	 "\n"
	 "URL is a store: file:///dir, https://ACCOUNT.blob.core.windows.net/\n"
	 "CONTAINER[/PREFIX], http://HOST:PORT/ACCOUNT/CONTAINER[/PREFIX]\n"
	 "(Azurite), or azure://CONTAINER[/PREFIX] with the endpoint from\n"
	 "AZURE_STORAGE_CONNECTION_STRING. Credentials come from\n"
	 "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or\n"
	 "AZURE_STORAGE_SAS_TOKEN. put and get print the sha256 of the bytes\n"
	 "moved.\n"
	 "\n"
	 "  --create-only     fail if the blob exists (If-None-Match: *)\n"
	 "  --single-put S    files up to S go in one Put Blob (default 64Mi,\n"
	 "                    as Azure's SDKs); larger ones in blocks\n"
	 "  --parallel N      blocks (uploads) or ranges (downloads) in flight\n"
	 "                    for large files (default 6)\n"
	 "  --block-size S    Put Block and download range size (default 8Mi)\n",
	 false},
	{"ckpt", cmd_ckpt, NULL, "upload, list, restore and prune checkpoints",
	 "usage: kiln ckpt upload URL JOB DIR\n"
	 "       kiln ckpt ls URL JOB\n"
	 "       kiln ckpt restore URL JOB DEST\n"
	 "       kiln ckpt prune URL JOB --keep K\n"
	 "       kiln ckpt outputs URL JOB DIR\n"
	 "\n"
	 "What the server does for checkpoints, by hand. upload sends DIR as\n"
	 "JOB/checkpoints/NAME/ (NAME is DIR's last part) with MANIFEST.json\n"
	 "last; restore puts the newest checkpoint that verifies into\n"
	 "DEST/NAME, prints NAME, and warns on stderr of each one skipped.\n"
	 "URL and credentials as for `kiln blob`.\n"
	 "\n"
	 "  --files N         files copied at once (default: the store's, up to\n"
	 "                    4 for file://; the server's sync uses 1)\n"
	 "  --single-put S, --parallel N, --block-size S  as for kiln blob\n",
	 false},
	{"openapi", cmd_openapi, NULL, "print the API's OpenAPI 3.1 document",
	 "usage: kiln openapi\n"
	 "\n"
	 "Print the OpenAPI 3.1 description of the HTTP API (JSON), the same\n"
	 "document a server answers at GET /v1/openapi.json; needs no server.\n"
	 "`make openapi` writes it to docs/openapi.json.\n",
	 false},
	{"ui", cmd_ui, NULL, "print a one-time login link to the web console",
	 "usage: kiln ui\n"
	 "\n"
	 "Ask the server for a one-time login code for this token (an admin's)\n"
	 "and print the console's link with it: SERVER/#code=CODE. The code\n"
	 "works once, within 5 minutes, and stays out of requests and logs (it\n"
	 "is in the link's fragment); opening the link starts a console session\n"
	 "that lasts 8 hours or until logged out.\n",
	 false},
	{"version", cmd_version, NULL, "print kiln's version",
	 "usage: kiln version\n"
	 "\n"
	 "Print `kiln VERSION`.\n",
	 false},
	{"man", cmd_man, NULL, "print a manual page (roff)",
	 "usage: kiln man [COMMAND]\n"
	 "\n"
	 "Print kiln(1), or kiln-COMMAND(1), as roff made from the help texts:\n"
	 "kiln man ls | man -l -. Installed pages come from this command.\n",
	 false},
	{"completion", cmd_completion, NULL,
	 "print the shell completion script",
	 "usage: kiln completion bash|zsh\n"
	 "\n"
	 "Print completion for bash or zsh: command names, each command's\n"
	 "flags and subcommands (from their help), files otherwise. The\n"
	 "package installs both; by hand: source <(kiln completion bash).\n",
	 false},
	{"bench", cmd_bench, NULL, "measure collectives the way nccl-tests does",
	 "usage: kiln bench COLLECTIVE [-b MIN] [-e MAX] [-i STEP | -f FACTOR]\n"
	 "                  [-g N] [-t N] [-o OP] [-d TYPE] [-r ROOT] [-n ITERS]\n"
	 "                  [-w ITERS] [-c 0|1] [-a 0-3] [-z 0|1] [-G N]\n"
	 "                  [--backend cpu|mpi|nccl] [--min-busbw GB/s]\n"
	 "\n"
	 "Time a collective over a range of sizes and print nccl-tests' table:\n"
	 "size, count, type, redop, root, then out-of-place and in-place time\n"
	 "(us), algbw and busbw (GB/s) and #wrong, and the average bus\n"
	 "bandwidth. COLLECTIVE: all_reduce, all_gather, reduce_scatter,\n"
	 "broadcast, reduce, alltoall, sendrecv.\n"
	 "\n"
	 "  -b, --minbytes SIZE    smallest size (default 32M; K, M, G suffixes)\n"
	 "  -e, --maxbytes SIZE    largest size (default 32M)\n"
	 "  -i, --stepbytes SIZE   add this between sizes (default 1M)\n"
	 "  -f, --stepfactor N     multiply by N between sizes instead\n"
	 "  -g, --ngpus N          ranks per thread: GPUs (nccl) or ranks (cpu)\n"
	 "  -t, --nthreads N       threads; a cpu or nccl run has g x t ranks\n"
	 "  -o, --op OP            sum, prod, min, max, avg or all (default sum)\n"
	 "  -d, --datatype TYPE    int8, uint8, int32, uint32, int64, uint64,\n"
	 "                         half, float, double, bfloat16 or all\n"
	 "  -r, --root N           root of broadcast and reduce (default 0)\n"
	 "  -n, --iters N          timed calls per size (default 20)\n"
	 "  -w, --warmup_iters N   untimed calls first (default 5)\n"
	 "  -c, --check 0|1        check results, counted in #wrong (default 1)\n"
	 "  -a, --average 0-3      time reported: rank 0's, mean, min, max (1)\n"
	 "  -z, --blocking 0|1     wait for each call (cpu and mpi always do)\n"
	 "  -G, --cudagraph N      accepted for nccl-tests scripts; ignored\n"
	 "  --backend B            cpu: threads over shared memory (default);\n"
	 "                         mpi: one rank per process, run under mpirun;\n"
	 "                         nccl: GPUs of this machine\n"
	 "  --min-busbw GB/s       exit 1 when the average bus bandwidth is lower\n"
	 "\n"
	 "Exit status: 0, or 1 when a result was wrong, the bandwidth was below\n"
	 "--min-busbw or the backend failed; 2 on a usage error.\n",
	 false},
	{"shim", NULL, cmd_shim, "run one task (internal: started by the server)",
	 "usage: kiln shim --dir TASK_DIR | --slurm ATTEMPT_DIR |\n"
	 "                 --kube -- CMD... | --install DIR |\n"
	 "                 --bridge TASK_DIR [--port P]\n"
	 "\n"
	 "Internal: the server starts one shim per task; in a Kubernetes pod\n"
	 "the initContainer runs --install and the task container --kube\n"
	 "(docs/kubernetes.md, \"The shim in the pod\"); the server's srun\n"
	 "runs --bridge on a Slurm task's node for an interactive session or\n"
	 "a port-forward.\n",
	 true},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

const struct cli_command *cli_commands(size_t *n)
{
	*n = N_COMMANDS;
	return commands;
}

void cli_print_help(FILE *f)
{
	size_t i;
	int width = 0;

	fputs("usage: kiln [GLOBAL FLAGS] COMMAND [ARGS]\n"
	      "\n"
	      "kiln runs AI jobs on GPU machines.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i].hidden && (int)strlen(commands[i].name) > width)
			width = (int)strlen(commands[i].name);
	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i].hidden)
			fprintf(f, "  %-*s %s\n", width, commands[i].name,
				commands[i].summary);
	fputs("\n"
	      "Run `kiln COMMAND --help` for a command's flags.\n"
	      "\n"
	      "Global flags (before or after the command):\n"
	      "  --server URL     the API server; else $KILN_SERVER, else the URL\n"
	      "                   in $KILN_HOME/server.url (KILN_HOME defaults to\n"
	      "                   ~/.kiln)\n"
	      "  --token TOKEN    the API token; else $KILN_TOKEN, else the one in\n"
	      "                   $KILN_HOME/admin.token\n"
	      "  An https:// server's certificate is verified against the\n"
	      "  system's CAs, or $KILN_CA (a PEM file); $KILN_CLIENT_CERT and\n"
	      "  $KILN_CLIENT_KEY give a client certificate (docs/tls.md)\n"
	      "  -o, --output table|wide|json|yaml|name\n"
	      "                   how listings are printed (default: table, cut\n"
	      "                   to 80 columns; wide: nothing cut; name: ids\n"
	      "                   or names alone, where a command lists them)\n"
	      "  --no-headers     tables without their header row\n"
	      "  -h, --help       this help\n"
	      "  --version        print kiln's version\n"
	      "\n"
	      "Exit status:\n"
	      "  0  success\n"
	      "  1  the request failed (API error, invalid spec, not found)\n"
	      "  2  usage error\n"
	      "  3  server unreachable, or no server configured\n"
	      "  4  submit --wait: the job failed\n"
	      "  5  submit --wait: the job was cancelled\n"
	      "  submit --follow exits with the job's own exit code when it\n"
	      "  failed with one\n",
	      f);
}

static const struct cli_command *find_command(const char *name)
{
	size_t i;

	for (i = 0; i < N_COMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static int unknown_command(struct cli_ctx *ctx, const char *name)
{
	const char *names[N_COMMANDS + 1];
	const char *near;
	size_t i, n = 0;

	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i].hidden)
			names[n++] = commands[i].name;
	names[n] = NULL;
	near = cli_closest(name, names);
	if (near)
		return cli_usage_error(ctx,
				       "unknown command '%s'; did you mean '%s'?",
				       name, near);
	return cli_usage_error(ctx, "unknown command '%s'; see 'kiln --help'",
			       name);
}

/* `kiln help [COMMAND]`. */
static int help_command(struct cli_ctx *ctx, int argc, char **argv)
{
	const struct cli_command *cmd;

	if (argc < 2) {
		cli_print_help(stdout);
		return CLI_EXIT_OK;
	}
	cmd = find_command(argv[1]);
	if (!cmd)
		return unknown_command(ctx, argv[1]);
	fputs(cmd->help, stdout);
	return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct cli_ctx ctx = {0};
	const struct cli_command *cmd;
	int i, rc;

	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			cli_print_help(stdout);
			return CLI_EXIT_OK;
		}
		if (!strcmp(argv[i], "--version")) {
			puts("kiln " KN_VERSION);
			return CLI_EXIT_OK;
		}
		rc = cli_take_flag(&ctx, NULL, argc, argv, &i);
		if (rc != CLI_GO)
			return rc;
	}
	rc = cli_check_output(&ctx);
	if (rc != CLI_GO)
		return rc;
	if (i == argc) {
		cli_print_help(stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help"))
		return help_command(&ctx, argc - i, argv + i);
	cmd = find_command(argv[i]);
	if (!cmd)
		return unknown_command(&ctx, argv[i]);
	if (cmd->run_raw) {
		/* The table holds every command's help, these two's as well. */
		if (i + 1 < argc && (!strcmp(argv[i + 1], "--help") ||
				     !strcmp(argv[i + 1], "-h"))) {
			fputs(cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		return cmd->run_raw(argc - i, argv + i);
	}

	ctx.cmd = cmd;
	snprintf(ctx.prog, sizeof(ctx.prog), "kiln %s", cmd->name);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fputs("kiln: cannot start libcurl\n", stderr);
		return CLI_EXIT_FAIL;
	}
	rc = cmd->run(&ctx, argc - i, argv + i);
	curl_global_cleanup();
	if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
		perror("kiln: standard output");
		rc = CLI_EXIT_FAIL;
	}
	return rc;
}
