#!/bin/bash
# One serving replica of a capacity-infusion pool (planc.conf Pool=...
# Script=): a stand-in for a model server.  It says where it serves, keeps
# serving until SIGTERM, then drains for PLANC_DRAIN_SECONDS (the pool's
# DrainGrace less a margin) and exits 0.  Replace the loop with the real
# server; keep the trap, so a shrinking pool's replica finishes its
# requests before Slurm kills it.
#SBATCH --job-name=planc-replica
set -u
draining=0
trap 'draining=1' TERM
echo "replica ${SLURM_JOB_ID:-?} serving on $(hostname) with GPU(s) ${CUDA_VISIBLE_DEVICES:-none}"
while [ "$draining" = 0 ]; do
  sleep 1
done
echo "replica ${SLURM_JOB_ID:-?}: SIGTERM at $(date -u +%FT%TZ), draining"
sleep "${PLANC_DRAIN_SECONDS:-1}"
exit 0
