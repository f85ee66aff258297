#!/bin/sh
# The image's entrypoint: says how executors are spawned (the sandbox is off by
# default in a container), then becomes `blockx serve` (so SIGTERM drains it).
if [ "${EXECUTOR_SPAWN_MODE:-process}" = "process" ]; then
    echo "blockx-image: EXECUTOR_SPAWN_MODE=process: executors run as plain processes, without the bubblewrap sandbox (a container runtime's default profile forbids it; a privileged run can set EXECUTOR_SPAWN_MODE=sandbox)" >&2
fi
exec blockx serve "$@"
