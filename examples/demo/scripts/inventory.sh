#!/bin/sh
# Demo check 1 (Pod, one per Node): GPU inventory. On real hardware an operator would compare
# `nvidia-smi -L` with the Node's expected GPU count and fail on a mismatch; the demo's
# simulated Nodes have no GPUs to list, so it records what it was asked to verify.
echo "inventory on $SIGNAL_NODE_NAME (participant $SIGNAL_PARTICIPANT_INDEX of Run $SIGNAL_RUN_NAME)"
printf '{"gpus": 8, "driver": "simulated"}' > "$SIGNAL_MEASUREMENTS_FILE"
