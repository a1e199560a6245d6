#!/usr/bin/env bash
# Renders deploy/helm/nereid into the plain manifests of deploy/kubernetes/ (the chart is the one
# source; tests/e2e/test_deploy_manifests.py checks the two agree). Needs helm (the venv's, from
# the helm-binary package, or one on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=$(command -v .venv/bin/helm || command -v helm)
render() {  # render <output> <header> [helm template flags...]
  local out=$1 header=$2
  shift 2
  { printf '%s\n' "$header"; "$HELM" template nereid deploy/helm/nereid "$@"; } > "$out"
}
render deploy/kubernetes/nereid.yaml \
  "# Nereid on Kubernetes, plain manifests: deploy/helm/nereid rendered with its default values by
# deploy/render.sh (do not edit; docs/deploy.md). kubectl apply -f deploy/kubernetes/nereid.yaml"
render deploy/kubernetes/keda-scaledobject.yaml \
  "# The KEDA alternative to nereid.yaml's HorizontalPodAutoscaler (apply one of the two; set the
# Prometheus address): deploy/render.sh, autoscaling.mode=keda." \
  --set autoscaling.mode=keda --show-only templates/autoscaling.yaml
