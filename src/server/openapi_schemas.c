/*
 * The objects the API answers with, in openapi.h's field notation; the
 * shapes docs/api.md shows. Fields an answer adds only in some cases (a
 * job's detail, a deployment under Kubernetes) are optional ('~').
 */
#include "openapi.h"

const struct oa_object oa_objects[] = {
	{"Error", "Every error answer: the code, a message, and the field to "
	 "blame (null when no single one is)",
	 "error:ErrorBody",
	 "{\"error\": {\"code\": \"invalid_argument\", \"field\": "
	 "\"resources.gpus\", \"message\": \"job.yaml:4:9: gpus must be a "
	 "number or mig:PROFILE\"}}"},
	{"ErrorBody", NULL, "code:ErrorCode message:string field:string?", NULL},
	{"ErrorCode", NULL,
	 "enum invalid_argument unauthenticated permission_denied not_found "
	 "conflict too_large limit_exceeded internal unavailable "
	 "insufficient_storage", NULL},
	{"Role", NULL, "enum viewer user operator admin", NULL},
	{"JobState", NULL,
	 "enum queued running succeeded failed cancelled preempted", NULL},
	{"Job", "A batch job; GET /v1/jobs/{id} adds the detail fields",
	 "id:integer name:string owner:string state:JobState "
	 "priority:integer tasks:integer preemptible:boolean "
	 "submitted_at_ms:integer started_at_ms:integer ended_at_ms:integer "
	 "not_before_ms:integer attempts:integer retries:integer "
	 "retries_used:integer cancel_requested:boolean reason:string? "
	 "exit_code:integer ~resources:JobResources ~spec:object "
	 "~spec_yaml:string? ~filename:string? ~goodput:Goodput "
	 "~outputs:[Output] ~inputs:[Input] ~attempts_detail:[Attempt] "
	 "~array:JobArray",
	 "{\"id\": 7, \"name\": \"hello\", \"owner\": \"admin\", "
	 "\"state\": \"running\", \"priority\": 0, \"tasks\": 2, "
	 "\"preemptible\": false, \"submitted_at_ms\": 1764690000000, "
	 "\"started_at_ms\": 1764690000050, \"ended_at_ms\": 0, "
	 "\"not_before_ms\": 0, \"attempts\": 1, \"retries\": 2, "
	 "\"retries_used\": 0, \"cancel_requested\": false, "
	 "\"reason\": null, \"exit_code\": -1, \"resources\": {\"gpus\": 1, "
	 "\"cpus\": 0, \"memory_bytes\": 0, \"gpu_model\": []}}"},
	{"JobArray",
	 "A job array: id is its first element's; an element has its index, "
	 "a listing's row the counts by state, the first element's detail "
	 "its elements",
	 "id:integer ~index:integer first:integer count:integer "
	 "parallel:integer ~counts:{integer} ~elements:[ArrayElement]",
	 NULL},
	{"ArrayElement", "One element of a job array",
	 "index:integer id:integer state:JobState attempts:integer "
	 "exit_code:integer reason:string?", NULL},
	{"JobResources", NULL,
	 "gpus:number|string cpus:number|string memory_bytes:integer|string "
	 "~gpu_model:[string]|string", NULL},
	{"Goodput", NULL,
	 "useful_task_seconds:number lost_task_seconds:number "
	 "percent:number?", NULL},
	{"Output", "A file a succeeded job left in KILN_OUTPUT_DIR",
	 "name:string size:integer sha256:string url:string", NULL},
	{"Input", "An input a job's attempts fetched",
	 "input:string name:string url:string? ~sha256:string? "
	 "~size:integer? ~attempt:integer?", NULL},
	{"Attempt", "One run of a job's tasks",
	 "number:integer state:string started_at_ms:integer "
	 "ended_at_ms:integer exit_code:integer signal:integer "
	 "reason:string? ~checkpoint:string? ~checkpoint_at_ms:integer "
	 "~checkpoint_next:object ~restore_ms:integer ~useful_task_ms:integer ~lost_task_ms:integer "
	 "tasks:[Task]", NULL},
	{"Task", "One rank of an attempt",
	 "rank:integer node:string? devices:[integer] ~gpu_milli:integer "
	 "state:string exit_code:integer signal:integer "
	 "started_at_ms:integer ended_at_ms:integer ~task_dir:string?", NULL},
	{"Node", "A machine the scheduler places tasks on",
	 "name:string state:string reason:string? simulated:boolean "
	 "device_source:string labels:{string} taints:[any] cpus:number "
	 "memory_bytes:integer cpus_allocated:number "
	 "memory_allocated_bytes:integer devices:[Device] "
	 "~fragmentation:object? ~isolation:string ~limits:object "
	 "slurm:SlurmNode?", NULL},
	{"SlurmNode", "What Slurm last said of a node (under --executor "
	 "slurm; null otherwise): its state as sinfo names it (idle, mixed, "
	 "allocated, draining, drained, down, ...), its flags and reason",
	 "state:string flags:string reason:string? partitions:string "
	 "features:string cpus:integer cpus_allocated:integer "
	 "memory_mb:integer memory_allocated_mb:integer gres:[SlurmGres] "
	 "schedulable:boolean",
	 "{\"state\": \"drained\", \"flags\": \"DRAIN\", \"reason\": "
	 "\"kiln health: disk_free: / has 1.2 GiB free\", \"partitions\": "
	 "\"gpu,debug\", \"features\": \"ib\", \"cpus\": 64, "
	 "\"cpus_allocated\": 0, \"memory_mb\": 512000, "
	 "\"memory_allocated_mb\": 0, \"gres\": [{\"name\": \"gpu\", "
	 "\"type\": \"a100\", \"count\": 8, \"used\": 0, \"mig\": "
	 "false}], \"schedulable\": false}"},
	{"SlurmGres", NULL,
	 "name:string type:string count:integer used:integer mig:boolean",
	 NULL},
	{"Device", NULL,
	 "index:integer uuid:string model:string memory_bytes:integer "
	 "simulated:boolean allocated_milli:integer allocations:[object] "
	 "mig:boolean", NULL},
	{"NodeState", "A node after an operation",
	 "name:string state:string reason:string?", NULL},
	{"Token", "An API token (never its secret)",
	 "id:integer name:string role:Role created_by:string? "
	 "created_at_ms:integer revoked_at_ms:integer "
	 "last_used_at_ms:integer",
	 "{\"id\": 2, \"name\": \"alice\", \"role\": \"user\", "
	 "\"created_by\": \"admin\", \"created_at_ms\": 1764690000000, "
	 "\"revoked_at_ms\": 0, \"last_used_at_ms\": 1764690001000}"},
	{"Removed", "What a revoke or delete answers: the name, and "
	 "revoked or deleted",
	 "name:string ~revoked:boolean ~deleted:boolean", NULL},
	{"AuditRow", NULL,
	 "id:integer time_ms:integer actor:string role:string? "
	 "action:string object:string? outcome:string detail:string? "
	 "hash:string?", NULL},
	{"Alert", NULL,
	 "id:integer rule:string severity:string state:string "
	 "fingerprint:string labels:object summary:string? value:number? "
	 "active_at_ms:integer fired_at_ms:integer resolved_at_ms:integer", NULL},
	{"Event", "One line of the event stream; the other fields depend on "
	 "type (job.state, node.state, alert.firing, deployment.state, ...)",
	 "seq:integer time_ms:integer type:string",
	 "{\"seq\": 12, \"time_ms\": 1764690000050, \"type\": "
	 "\"job.state\", \"job\": 7, \"state\": \"running\", "
	 "\"reason\": null}"},
	{"BackupRun", NULL,
	 "name:string url:string? actor:string? state:string "
	 "with_audit_key:boolean parts:integer bytes:integer "
	 "started_at_ms:integer ended_at_ms:integer error:string?", NULL},
	{"Deployment", "A served model: its replicas are jobs",
	 "name:string owner:string model:string "
	 "replicas_wanted:integer replicas_ready:integer generation:integer "
	 "fallback:string? limits:object created_at_ms:integer "
	 "updated_at_ms:integer rollout:object? ~spec:object "
	 "replicas:[Replica] ~follows:string? ~model_version:integer? "
	 "~kubernetes:object traffic:Traffic?", NULL},
	{"Traffic", "What the gateways reported of a deployment's requests "
	 "over the last 5 minutes (window_s: the span their numbers cover), "
	 "summed over gateways; null when none reported it",
	 "window_s:number requests:integer requests_per_s:number "
	 "errors:integer rate_limited:integer fallbacks:integer "
	 "upstream_errors:integer tokens:integer latency_p50_ms:number? "
	 "latency_p99_ms:number? gateways:integer reported_at_ms:integer",
	 NULL},
	{"GatewayDeploymentCounters", "One deployment's counters in a "
	 "gateway's report, cumulative since it started",
	 "name:string requests:integer errors:integer rate_limited:integer "
	 "fallbacks:integer upstream_errors:integer tokens:integer "
	 "latency_bounds_s:[number] latency_counts:[integer]", NULL},
	{"Replica", NULL,
	 "replica:integer ~job:integer? state:string ready:boolean "
	 "~restarts:integer address:string? node:string? zone:string?", NULL},
	{"Key", "A gateway key (never its secret or hash)",
	 "name:string deployments:[string] rpm:integer tpm:integer "
	 "quota_day:integer quota_month:integer created_by:string? "
	 "created_at_ms:integer", NULL},
	{"GatewayConfig", "What the gateway serves: deployments and keys",
	 "generation:integer deployments:[object] keys:[object]", NULL},
	{"ModelSummary", NULL,
	 "name:string versions:integer latest:integer? aliases:{integer} "
	 "created_at_ms:integer updated_at_ms:integer",
	 "{\"name\": \"gpt\", \"versions\": 3, \"latest\": 3, "
	 "\"aliases\": {\"prod\": 2}, \"created_at_ms\": 1764690000000, "
	 "\"updated_at_ms\": 1764690900000}"},
	{"Model", "A model (NAME) or one of its versions (NAME@VERSION, "
	 "NAME@ALIAS)",
	 "name:string ~versions:[object] ~aliases:[object]|[string] "
	 "~version:integer ~manifest:object ~signatures:[object] "
	 "~trusted:boolean ~store:string ~evaluations:[object]", NULL},
	{"ModelVersion", "A version just registered",
	 "name:string version:integer files:integer bytes:integer "
	 "alias:string? manifest:object", NULL},
	{"AliasMove", "An alias moved by promote or rollback",
	 "name:string alias:string version:integer from:integer?", NULL},
	{"Revalidation", NULL,
	 "name:string alias:string every_ms:integer thresholds:object "
	 "rollback:boolean next_at_ms:integer", NULL},
	{"WorkflowRun", "A workflow run; the list leaves out steps, order "
	 "and files",
	 "id:integer name:string owner:string state:string reason:string? "
	 "filename:string? digest:string? revision:string? "
	 "submitted_at_ms:integer started_at_ms:integer "
	 "ended_at_ms:integer steps_total:integer steps_by_state:{integer} "
	 "~steps:[Step] ~order:[string] ~files:[string] ~cost_usd:number? "
	 "~gpu_seconds:number ~cost_unpriced:boolean", NULL},
	{"Step", NULL,
	 "name:string state:string needs:[string] job:integer? "
	 "attempts:integer retries:integer started_at_ms:integer "
	 "ended_at_ms:integer reason:string? metrics:object? "
	 "~attempt_history:[object]", NULL},
	{"Pool", NULL,
	 "name:string provider:string sku:string? gpus:integer|string "
	 "min:integer "
	 "max:integer current:integer nodes:[object]", NULL},
	{"Rolling", "Rolling maintenance of a pool",
	 "pool:string command:string state:string node:string? step:string? "
	 "done:[string] nodes:integer started_at_ms:integer "
	 "ended_at_ms:integer error:string?", NULL},
	{"CostRow", NULL,
	 "key:string gpu_seconds:number cost_usd:number? "
	 "total_cost_usd:number? unpriced:boolean|integer", NULL},
	{"DevenvCost", "Dev environments in the window: idle time, and what "
	 "stopping idle ones saved",
	 "rows:[DevenvCostRow] total:DevenvCostTotal", NULL},
	{"DevenvCostRow", NULL,
	 "job:integer owner:string name:string gpus:number hours:number "
	 "idle_hours:number idle_gpu_hours:number idle_cost_usd:number "
	 "stopped_for:string? saved_gpu_hours:number saved_usd:number", NULL},
	{"DevenvCostTotal", NULL,
	 "idle_gpu_hours:number idle_cost_usd:number idle_stops:integer "
	 "saved_gpu_hours:number saved_usd:number", NULL},
};

const size_t oa_n_objects = KN_LEN(oa_objects);
