/*
 * What each route takes and answers, in openapi.h's notation; who may
 * call it comes from the route tables themselves. A route added to a
 * table without an entry here makes the document fail to build (and the
 * services unit test fail), so describe it in the same change.
 */
#include "openapi.h"

#define DEPLOYMENT_ANSWER "200 json deployment:Deployment"
#define WORKFLOW_ANSWER "200 json workflow:WorkflowRun"
#define NODE_ANSWER "200 json node:NodeState"
#define COST_WINDOW "since:integer until:integer"

const struct oa_op oa_ops[] = {
	{"GET", "/healthz", "whether the server answers, and its version",
	 NULL, NULL, "200 json ok:boolean version:string"},
	{"GET", "/v1/openapi.json", "this document", NULL, NULL,
	 "200 json openapi:string info:object paths:object"},
	{"GET", "/metrics",
	 "the server's metrics in Prometheus text format (docs/metrics.md)",
	 NULL, NULL, "200 text"},
	{"GET", "/v1/whoami", "the caller's token name and role", NULL, NULL,
	 "200 json name:string role:Role"},
	{"POST", "/v1/jobs", "submit a job spec (YAML or JSON)",
	 "file:string path:string hold:integer overrides:string", "yaml",
	 "201 json job:Job; 400 error the spec is invalid (file:line:column); "
	 "409 error the job can never fit (unless hold=1)"},
	{"GET", "/v1/jobs",
	 "jobs by id, oldest first (order=desc: newest; before=ID: only "
	 "smaller ids); a job array is one entry (its elements' counts in "
	 "array.counts) unless elements=1 or array=ID (that array's elements)",
	 "state:JobState owner:string name:string limit:integer "
	 "elements:integer array:integer before:integer order:string",
	 NULL, "200 json jobs:[Job]"},
	{"GET", "/v1/jobs/{id}",
	 "a job with its attempts, outputs and spec; an array's first "
	 "element also lists the elements; index=K: the array's element K",
	 "index:integer", NULL, "200 json job:Job"},
	{"POST", "/v1/jobs/{id}/cancel",
	 "cancel a job; array=1: every element of the array it names",
	 "array:integer", NULL, "200 json job:Job"},
	{"POST", "/v1/jobs/{id}/evict",
	 "preempt a running preemptible job (array=1: every running element "
	 "of the array it names); it resumes later",
	 "grace:string reason:string array:integer", NULL,
	 "200 json job:Job; 409 error the job is not running or not "
	 "preemptible"},
	{"GET", "/v1/jobs/{id}/port-forward",
	 "a connection to a port the job's task listens on (owner or "
	 "operator): send Connection: Upgrade and Upgrade: kiln-port-forward",
	 "port:integer task:integer", NULL,
	 "101 upgrade the connection is now a byte pipe to the task's port; "
	 "409 error the task is not running or does not listen on the port; "
	 "503 error the connect failed"},
	{"GET", "/v1/jobs/{id}/logs", "a task's output, or a stream of it",
	 "task:integer attempt:integer follow:integer offset:integer "
	 "tail:integer since:string timestamps:integer",
	 NULL, "200 text"},
	{"GET", "/v1/jobs/{id}/attach",
	 "attach to the terminal of a running task (a tty job): the "
	 "connection upgrades to kiln-mux/1 (docs/api.md, Interactive "
	 "sessions); the job's owner and operators",
	 "task:integer rows:integer cols:integer", NULL,
	 "101 upgrade switching to kiln-mux/1; 409 error the job is not "
	 "running; 429 error the token's streams are at their cap"},
	{"POST", "/v1/jobs/{id}/exec",
	 "run command (a JSON array of strings) in a running task's sandbox "
	 "on a terminal (tty=1) or pipes: the connection upgrades to "
	 "kiln-mux/1; the job's owner and operators; audited with the "
	 "command line",
	 "task:integer tty:integer rows:integer cols:integer command:string",
	 NULL,
	 "101 upgrade switching to kiln-mux/1; 409 error the job is not "
	 "running; 429 error the token's streams are at their cap"},
	{"GET", "/v1/nodes", "the nodes and their devices", NULL, NULL,
	 "200 json nodes:[Node]"},
	{"POST", "/v1/nodes/{name}/cordon", "stop new work on a node",
	 "reason:string", NULL, NODE_ANSWER},
	{"POST", "/v1/nodes/{name}/drain",
	 "stop new work on a node and evict its preemptible jobs",
	 "reason:string", NULL, NODE_ANSWER},
	{"POST", "/v1/nodes/{name}/uncordon", "make a node ready again",
	 NULL, NULL, NODE_ANSWER},
	{"POST", "/v1/nodes/{name}/health",
	 "report a node unhealthy, or healthy again", NULL,
	 "json healthy:boolean ~reason:string", NODE_ANSWER},
	{"GET", "/v1/audit", "the audit log, newest first",
	 "actor:string action:string since:integer limit:integer", NULL,
	 "200 json audit:[AuditRow]"},
	{"GET", "/v1/audit/verify", "check the audit log's hash chain", NULL,
	 NULL, "200 json ok:boolean rows:integer head:object? anchor:object?"},
	{"GET", "/v1/alerts", "firing and recently resolved alerts",
	 "all:integer", NULL, "200 json alerts:[Alert] enabled:boolean"},
	{"GET", "/v1/events", "the event log, or a live stream of it",
	 "since:integer follow:integer", NULL, "200 ndjson Event"},
	{"POST", "/v1/console/codes",
	 "a one-time console login code for the caller's token (kiln ui)",
	 NULL, NULL, "201 json code:string expires_at_ms:integer"},
	{"POST", "/v1/console/sessions",
	 "a console session for a one-time code, or for the bearer token",
	 NULL, "json ~code:string",
	 "201 json session:string expires_at_ms:integer name:string "
	 "role:Role; 400 error neither a code nor a token; 401 error the "
	 "code or token is unknown, expired or used"},
	{"DELETE", "/v1/console/sessions", "end the caller's console session",
	 NULL, NULL, "200 json ended:boolean"},
	{"GET", "/v1/tokens", "the API tokens", NULL, NULL,
	 "200 json tokens:[Token]"},
	{"POST", "/v1/tokens", "create a token; its secret is shown once",
	 NULL, "json name:string role:Role",
	 "201 json token:Token secret:string"},
	{"DELETE", "/v1/tokens/{name}", "revoke a token", NULL, NULL,
	 "200 json token:Removed"},
	{"POST", "/v1/backups", "back up the database to a store", NULL,
	 "json ~to:string ~with_audit_key:boolean",
	 "202 json backup:BackupRun"},
	{"GET", "/v1/backups", "this server's last backup runs", NULL, NULL,
	 "200 json store:string? schedule:any runs:[BackupRun]"},
	{"GET", "/v1/backups/{name}", "one backup run", NULL, NULL,
	 "200 json backup:BackupRun"},
	{"GET", "/v1/cost", "what GPU time cost, by job, user, deployment, "
	 "node or day",
	 "by:string " COST_WINDOW " detail:integer", NULL,
	 "200 json by:string since_ms:integer until_ms:integer rows:[CostRow] "
	 "total:CostRow nodes:[object] unpriced_nodes:[string] "
	 "devenvs:DevenvCost"},
	{"GET", "/v1/cost/reservations",
	 "whether reserved capacity or spot would pay off", COST_WINDOW, NULL,
	 "200 json since_ms:integer until_ms:integer skus:[object] "
	 "spot_candidates:[object]"},
	{"GET", "/v1/cost/rightsize",
	 "resources suggested from jobs' measured usage", COST_WINDOW, NULL,
	 "200 json since_ms:integer until_ms:integer rule:object "
	 "jobs:[object]"},
	{"POST", "/v1/deployments",
	 "create or update a deployment (YAML, or JSON with its files)",
	 "file:string path:string", "yaml",
	 "201 json deployment:Deployment; " DEPLOYMENT_ANSWER},
	{"GET", "/v1/deployments", "the deployments (without spec)", NULL,
	 NULL, "200 json deployments:[Deployment]"},
	{"GET", "/v1/deployments/{name}", "a deployment and its replicas",
	 NULL, NULL, DEPLOYMENT_ANSWER},
	{"POST", "/v1/deployments/{name}/scale",
	 "set a deployment's number of replicas", NULL,
	 "json replicas:integer", DEPLOYMENT_ANSWER},
	{"POST", "/v1/deployments/{name}/restart",
	 "replace a deployment's replicas one at a time", NULL, NULL,
	 DEPLOYMENT_ANSWER},
	{"DELETE", "/v1/deployments/{name}",
	 "delete a deployment and stop its replicas", NULL, NULL,
	 "200 json deployment:Removed"},
	{"POST", "/v1/keys", "create a gateway key; its secret is shown once",
	 NULL,
	 "json name:string deployments:[string] ~rpm:integer ~tpm:integer "
	 "~quota_day:integer ~quota_month:integer",
	 "201 json key:Key secret:string; 409 error an active key has the "
	 "name"},
	{"GET", "/v1/keys", "the active gateway keys", NULL, NULL,
	 "200 json keys:[Key]"},
	{"DELETE", "/v1/keys/{name}", "revoke a gateway key", NULL, NULL,
	 "200 json key:Removed"},
	{"GET", "/v1/gateway/config",
	 "what the gateway serves: deployments, replicas and key hashes",
	 NULL, NULL, "200 json GatewayConfig"},
	{"POST", "/v1/gateway/alerts", "an anomaly the gateway saw", NULL,
	 "json deployment:string signal:string value:number low:number "
	 "high:number window_s:integer started_at_ms:integer ~state:string",
	 "202 json accepted:boolean"},
	{"POST", "/v1/gateway/metrics",
	 "the gateway's counters and latency histogram per deployment since "
	 "it started; kept over a window for each deployment's traffic",
	 NULL, "json instance:string uptime_ms:integer "
	 "deployments:[GatewayDeploymentCounters]",
	 "202 json accepted:boolean; 429 error the server already keeps as "
	 "many gateways or deployments as it holds"},
	{"POST", "/v1/model-blobs/missing",
	 "which of these blobs the store lacks, and the largest part the "
	 "server takes", NULL, "json digests:[string]",
	 "200 json missing:[string] present:integer part_max:integer "
	 "~local:object"},
	{"POST", "/v1/model-blobs/{name}", "upload a part of a blob",
	 "upload:string offset:integer final:integer size:integer", "bytes",
	 "200 json ~upload:string digest:string received:integer "
	 "stored:boolean ~size:integer; "
	 "201 json digest:string received:integer stored:boolean "
	 "existed:boolean; 409 error offset is not where the upload stands, "
	 "or the part overlaps other bytes the upload holds"},
	{"GET", "/v1/model-blobs/{name}",
	 "what an upload in progress holds", "upload:string", NULL,
	 "200 json upload:string digest:string received:integer "
	 "size:integer stored:boolean ranges:[[integer]] part_max:integer; "
	 "404 error no such upload in progress"},
	{"POST", "/v1/model-uploads/{name}",
	 "upload a part of a blob named at its commit", "offset:integer "
	 "size:integer", "bytes",
	 "200 json upload:string received:integer size:integer "
	 "stored:boolean; 409 error the part overlaps other bytes the "
	 "upload holds, or lies too far past the bytes held from the start"},
	{"GET", "/v1/model-uploads/{name}",
	 "what an upload named at its commit holds", NULL, NULL,
	 "200 json upload:string received:integer size:integer "
	 "stored:boolean ranges:[[integer]] part_max:integer; "
	 "404 error no such upload in progress"},
	{"POST", "/v1/model-uploads/{name}/commit",
	 "store a whole upload as the blob of this digest", NULL,
	 "json digest:string size:integer",
	 "201 json digest:string received:integer stored:boolean "
	 "existed:boolean; 200 json digest:string received:integer "
	 "stored:boolean existed:boolean; 400 error the bytes hash to "
	 "another digest; 404 error no such upload in progress; 409 error "
	 "the upload lacks bytes, or was committed with another digest or "
	 "size; 429 error its running commit was sent again too often"},
	{"GET", "/v1/models", "the registry's models, by name", NULL, NULL,
	 "200 json models:[ModelSummary]"},
	{"GET", "/v1/models/{name}",
	 "a model (NAME), or a version (NAME@VERSION or NAME@ALIAS)",
	 "purpose:string", NULL, "200 json Model"},
	{"POST", "/v1/models/{name}/versions",
	 "register a version from blobs already in the store", NULL,
	 "json files:[object] ~alias:string",
	 "201 json ModelVersion; 409 error a file's blob is not in the "
	 "store"},
	{"POST", "/v1/models/{name}/signatures", "sign a version", NULL,
	 "json public_key:string signature:string",
	 "201 json name:string version:integer key_id:string "
	 "trusted:boolean"},
	{"POST", "/v1/models/{name}/promote", "point an alias at a version",
	 NULL, "json alias:string", "200 json AliasMove"},
	{"POST", "/v1/models/{name}/rollback",
	 "move an alias back to its previous version", NULL,
	 "json alias:string", "200 json AliasMove"},
	{"POST", "/v1/models/{name}/from-job",
	 "register a succeeded job's outputs as a version", NULL,
	 "json job:integer ~alias:string", "201 json ModelVersion"},
	{"GET", "/v1/models/{name}/lineage",
	 "what a version was made from, recursively", NULL, NULL,
	 "200 json name:string version:integer lineage:any metrics:any"},
	{"POST", "/v1/models/{name}/revalidation",
	 "set an alias's periodic revalidation", NULL,
	 "json alias:string job:string ~filename:string ~every:string "
	 "~thresholds:object ~rollback:boolean",
	 "200 json revalidation:Revalidation"},
	{"GET", "/v1/models/{name}/revalidation",
	 "a model's revalidations", NULL, NULL,
	 "200 json revalidations:[Revalidation]"},
	{"POST", "/v1/models/{name}/revalidation/run",
	 "revalidate an alias now", NULL, "json alias:string",
	 "202 json job:integer version:integer"},
	{"GET", "/v1/models/{name}/evaluations",
	 "a version's evaluations, oldest first", NULL, NULL,
	 "200 json name:string version:integer evaluations:[object]"},
	{"GET", "/v1/pools", "node pools and their autoscaling", NULL, NULL,
	 "200 json pools:[Pool] blocked:string?"},
	{"POST", "/v1/pools/{name}/rolling",
	 "start rolling maintenance of a pool", NULL,
	 "json command:string ~surge_timeout_s:integer",
	 "202 json rolling:Rolling; 409 error one runs on the pool"},
	{"GET", "/v1/pools/{name}/rolling",
	 "the pool's last rolling maintenance", NULL, NULL,
	 "200 json rolling:Rolling"},
	{"POST", "/v1/workflows", "run a workflow", NULL,
	 "json spec:string ~filename:string ~path:string ~files:{string} "
	 "~digest:string ~revision:string?",
	 "201 json workflow:WorkflowRun"},
	{"GET", "/v1/workflows", "workflow runs by id", NULL, NULL,
	 "200 json workflows:[WorkflowRun]"},
	{"GET", "/v1/workflows/{id}", "a workflow run and its steps", NULL,
	 NULL, WORKFLOW_ANSWER},
	{"POST", "/v1/workflows/{id}/cancel", "cancel a workflow run", NULL,
	 NULL, WORKFLOW_ANSWER "; 409 error the run has ended"},
	{"POST", "/v1/workflows/{id}/retry",
	 "run a failed or cancelled run's failed steps again", NULL, NULL,
	 WORKFLOW_ANSWER "; 409 error the run neither failed nor was "
	 "cancelled"},
};

const size_t oa_n_ops = KN_LEN(oa_ops);
