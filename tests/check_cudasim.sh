#!/bin/sh
# The CUDA kernels' checks under the CPU emulation (tests/cudasim/run.sh,
# --small shapes, both thread orders): what can be checked of cuda/*.cu
# without a GPU - indexing, shared memory, barriers and shuffles, against
# the same host references the GPU run uses. About 80 s on 2 cores, most
# of it compiling; skipped where the CUDA toolkit's headers are absent.
#   tests/check_cudasim.sh BUILD
exec sh "$(dirname "$0")/cudasim/run.sh" "${1:-build}"
