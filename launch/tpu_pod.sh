#!/usr/bin/env bash
# TPU pod slice on Cloud TPU VMs: starts `python -m jaxtom.cli train CONFIG [overrides...]` on
# every worker of the slice, detached (it survives the ssh session), one log per worker.
#
#   launch/tpu_pod.sh NAME ZONE CONFIG [section.field=value ...]   start on every worker
#   launch/tpu_pod.sh NAME ZONE --logs [LINES]                      last lines of each log
#   launch/tpu_pod.sh NAME ZONE --status                            is it running, per worker
#   launch/tpu_pod.sh NAME ZONE --stop                              stop it on every worker
#   launch/tpu_pod.sh NAME ZONE --kill                              SIGKILL it (no checkpoint)
#
# Each worker runs with JAXTOM_DISTRIBUTED=1, so `jaxtom train` calls
# jax.distributed.initialize() with no arguments and JAX reads the slice's workers from the
# TPU metadata. Settings (environment variables of this shell):
#   REPO_DIR     the checkout on every worker, expanded there (default: $HOME/jaxtom)
#   LOG_DIR      where each worker writes worker-<hostname>.log and .pid, expanded on the
#                worker (default: $HOME/jaxtom-logs)
#   PYTHON       the interpreter on the workers (default: python3; e.g. a venv's python)
#   FORWARD_ENV  more variable names to copy from this shell to every worker, space-separated;
#                always copied when set here: JAXTOM_MODELS XLA_FLAGS LIBTPU_INIT_ARGS
#                JAX_COMPILATION_CACHE_DIR TPU_STDERR_LOG_LEVEL TPU_MIN_LOG_LEVEL
#                CTOM_SIMULATOR_URL (the CToM paper configs' HTTP user simulator; its default,
#                http://127.0.0.1:8000/v1, is each worker's own loopback)
#                (JAX_PLATFORMS is copied too, default tpu)
#   GCLOUD       the gcloud command (default: gcloud); GCLOUD_SSH_ARGS: extra ssh flags,
#                e.g. "--project my-proj --tunnel-through-iap"
#   STOP_TIMEOUT seconds --stop waits for each worker's run to exit (default: 120)
# --stop sends SIGTERM to the run's process group: the run finishes its step, saves a
# checkpoint at that step on every worker, writes "jaxtom: stopped by SIGTERM (exit 143);
# checkpoint at step N ..." to its log and exits 143. --stop waits for that and reports, per
# worker, "stopped pid P (exit 143, checkpoint at step N in DIR)", or that the run is still
# going after STOP_TIMEOUT (then --kill ends it at once, losing the steps since the newest
# checkpoint). Starting the same command again resumes from the checkpoint.
# trainer.workdir must be storage every worker sees (gs://bucket/run or a shared mount):
# a local path would give each worker its own checkpoints (launch/README.md, "TPU pod slice").
set -euo pipefail

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[[ $# -ge 3 ]] || usage
TPU_NAME="$1"; ZONE="$2"; shift 2

REPO_DIR="${REPO_DIR:-\$HOME/jaxtom}"
LOG_DIR="${LOG_DIR:-\$HOME/jaxtom-logs}"
PYTHON="${PYTHON:-python3}"
GCLOUD="${GCLOUD:-gcloud}"
STOP_TIMEOUT="${STOP_TIMEOUT:-120}"
[[ "$STOP_TIMEOUT" =~ ^[0-9]+$ ]] || { echo "tpu_pod.sh: STOP_TIMEOUT='$STOP_TIMEOUT'; expected" \
  "a whole number of seconds" >&2; exit 2; }
# paths are left unquoted in the remote command so that $HOME expands on the worker; refuse
# characters that would split or run them there
for name in REPO_DIR LOG_DIR PYTHON; do
  if [[ "${!name}" =~ [[:space:]\;\&\|\<\>\`\(\)\'\"] ]]; then
    echo "tpu_pod.sh: $name='${!name}' holds spaces, quotes or shell operators; expected a" \
         "plain path (\$HOME may appear)" >&2
    exit 2
  fi
done

# per-worker file names: the TPU VM hostname carries the worker index (...-w-3)
LOG="$LOG_DIR/worker-\$(hostname).log"
PID="$LOG_DIR/worker-\$(hostname).pid"
# on the worker: is pid $1 a live process (an exited one not yet reaped counts as gone)
# shellcheck disable=SC2016  # expanded on the worker
ALIVE='alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]; }'
RUNNING="{ [ -f $PID ] && alive \$(cat $PID); }"

remote() {  # runs one bash command line on every worker
  # shellcheck disable=SC2086  # GCLOUD_SSH_ARGS is a list of flags
  "$GCLOUD" compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all \
    ${GCLOUD_SSH_ARGS:-} --command "bash -c $(printf '%q' "$1")"
}

case "$1" in
  --logs)
    LINES="${2:-50}"
    [[ "$LINES" =~ ^[0-9]+$ ]] || { echo "tpu_pod.sh: --logs takes a line count, got '$LINES'" >&2; exit 2; }
    remote "echo \"== \$(hostname): $LOG ==\"; tail -n $LINES $LOG"
    exit ;;
  --status)
    remote "$ALIVE; if $RUNNING; then echo \"\$(hostname): running (pid \$(cat $PID))\"; else echo \"\$(hostname): not running\"; fi"
    exit ;;
  --stop)
    # the run is a session leader (setsid): signal its whole process group, then wait for
    # it to save and exit, and report the stop line it wrote to its log
    remote "$ALIVE; if ! $RUNNING; then echo \"\$(hostname): not running\"; exit 0; fi; \
pid=\$(cat $PID); kill -TERM -- -\$pid; waited=0; \
while alive \$pid && [ \$waited -lt $STOP_TIMEOUT ]; do sleep 1; waited=\$((waited + 1)); done; \
if alive \$pid; then echo \"\$(hostname): pid \$pid still running ${STOP_TIMEOUT} s after SIGTERM (saving its checkpoint, or stuck): check again with --status or --logs, raise STOP_TIMEOUT, or end it now with --kill (SIGKILL: no checkpoint)\"; exit 1; fi; \
line=\$(grep 'jaxtom: stopped by' $LOG | tail -n 1); \
if [ -n \"\$line\" ]; then echo \"\$(hostname): stopped pid \$pid (\$(echo \"\$line\" | sed 's/.*(exit \\([0-9]*\\)); checkpoint at step \\([0-9]*\\) saved to \\([^;]*\\);.*/exit \\1, checkpoint at step \\2 in \\3/'))\"; \
else echo \"\$(hostname): stopped pid \$pid (it wrote no 'jaxtom: stopped' line: no checkpoint of its own; last log line: \$(tail -n 1 $LOG))\"; fi"
    exit ;;
  --kill)
    remote "$ALIVE; if $RUNNING; then kill -KILL -- -\$(cat $PID) && echo \"\$(hostname): killed pid \$(cat $PID) (SIGKILL: a rerun resumes from its newest checkpoint)\"; else echo \"\$(hostname): not running\"; fi"
    exit ;;
  -*)
    echo "tpu_pod.sh: unknown option '$1'; expected --logs, --status, --stop, --kill or a" \
         "config file" >&2
    exit 2 ;;
esac

# the environment every worker's run gets: names set here, in `export NAME=value` form
EXPORTS="export JAXTOM_DISTRIBUTED=1 JAX_PLATFORMS=$(printf '%q' "${JAX_PLATFORMS:-tpu}")"
for name in JAXTOM_MODELS XLA_FLAGS LIBTPU_INIT_ARGS JAX_COMPILATION_CACHE_DIR \
            TPU_STDERR_LOG_LEVEL TPU_MIN_LOG_LEVEL CTOM_SIMULATOR_URL; do
  if [[ -n "${!name+set}" ]]; then EXPORTS+=" $name=$(printf '%q' "${!name}")"; fi
done
for name in ${FORWARD_ENV:-}; do
  if [[ ! "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
    echo "tpu_pod.sh: FORWARD_ENV names '$name', which is not a variable name" >&2; exit 2
  fi
  if [[ -z "${!name+set}" ]]; then
    echo "tpu_pod.sh: FORWARD_ENV names $name, which is not set in this shell" >&2; exit 2
  fi
  EXPORTS+=" $name=$(printf '%q' "${!name}")"
done

case " $* " in
  *" trainer.workdir=gs://"*|*" trainer.workdir=/"*) ;;
  *) echo "tpu_pod.sh: note: no trainer.workdir=gs://... (or shared absolute path) override;" \
          "the config's workdir must be storage every worker sees" >&2 ;;
esac

if [[ "$(basename -- "$1")" == *ctom* && -z "${CTOM_SIMULATOR_URL+set}" \
      && " $* " != *" ctom.simulator_url="* ]]; then
  echo "tpu_pod.sh: note: neither CTOM_SIMULATOR_URL nor a ctom.simulator_url=... override;" \
       "a config with an HTTP user simulator (the CToM Qwen3-8B ones) then asks" \
       "http://127.0.0.1:8000/v1 on every worker" >&2
fi

ARGS="$(printf '%q ' "$@")"
remote "set -e; $ALIVE; mkdir -p $LOG_DIR; cd $REPO_DIR; \
if $RUNNING; then \
echo \"\$(hostname): a run is already going (pid \$(cat $PID)); stop it with --stop first\" >&2; exit 1; fi; \
$EXPORTS; \
setsid nohup $PYTHON -m jaxtom.cli train $ARGS > $LOG 2>&1 < /dev/null & \
echo \$! > $PID; echo \"\$(hostname): started pid \$!, log $LOG\""
