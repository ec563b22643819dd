#!/bin/sh
# One task of a Kubernetes Indexed Job (examples/kubernetes/tern-indexed-job.yaml): the pod takes
# line JOB_COMPLETION_INDEX + 1 of the task list and runs it with `tern exec --json`; the JSONL
# on stdout is the pod's log (`kubectl logs`), its last line the `result`. tern's exit code is
# the container's: 75 (provider unavailable) is retried by the Job's podFailurePolicy, other
# failures are not.
set -eu
: "${JOB_COMPLETION_INDEX:?set by Kubernetes for an Indexed Job}"
tasks="${TERN_TASKS:-/tasks/tasks.txt}"
task=$(sed -n "$((JOB_COMPLETION_INDEX + 1))p" "$tasks")
if [ -z "$task" ]; then
  echo "no task on line $((JOB_COMPLETION_INDEX + 1)) of $tasks" >&2
  exit 2
fi
exec tern exec --json --cd "${TERN_WORK:-/work}" --max-wall-time "${TERN_MAX_WALL_TIME:-3600}" "$task"
