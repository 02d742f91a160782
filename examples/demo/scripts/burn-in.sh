#!/bin/sh
# Demo check 3 (Pod, one per Node): a short burn-in. The demo makes gpu-003 fail it, the way
# a GPU that falls off the bus under load would, so that the run shows a proven failure.
case "$SIGNAL_NODE_NAME" in
  gpu-003)
    echo "Xid 79: GPU has fallen off the bus (simulated by the demo)" >&2
    exit 1
    ;;
esac
echo "burn-in ok on $SIGNAL_NODE_NAME"
