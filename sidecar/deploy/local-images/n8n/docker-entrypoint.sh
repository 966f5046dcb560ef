#!/bin/sh
# n8n's arguments go to n8n: none starts the main process, `worker` a
# queue-mode worker (as the official image's entrypoint does).
exec n8n "$@"
