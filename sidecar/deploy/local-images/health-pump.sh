#!/usr/bin/env bash
# Runs the health checks of running podman containers every INTERVAL
# seconds (default 2), for machines where podman cannot schedule them itself:
# podman runs a container's HEALTHCHECK from a systemd timer, so without
# systemd (a container, a CI runner) no check ever runs, every container
# stays "starting", and `depends_on: condition: service_healthy` waits
# forever. Not needed with Docker, nor with podman under systemd.
#
#   sidecar/deploy/local-images/health-pump.sh &     # stop it with kill %1
#
# Environment: INTERVAL (seconds, default 2); CONTAINERS_CONF as for podman.
set -uo pipefail
interval="${INTERVAL:-2}"
while :; do
	# Containers whose image or run defines a health check report a
	# Healthcheck in their configuration; others are left alone.
	for id in $(podman ps -q 2>/dev/null); do
		if [ -n "$(podman inspect --format '{{if .Config.Healthcheck}}{{.Config.Healthcheck.Test}}{{end}}' "$id" 2>/dev/null)" ]; then
			podman healthcheck run "$id" >/dev/null 2>&1 &
		fi
	done
	wait
	sleep "$interval"
done
