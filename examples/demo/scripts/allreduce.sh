#!/bin/sh
# Demo check 2 (MPIJob, one rank per Node): every rank runs this script under OpenMPI. On
# real hardware this is where all_reduce_perf would run (see examples/nccl-ib for the real
# NCCL check); here each rank proves it ran, where, and in which world.
echo "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE on $(hostname)"
