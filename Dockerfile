# GPU image for clusters: NVIDIA's TensorFlow container (TF 2.15, Horovod 0.28.1 built with NCCL and
# MPI, CUDA, Open MPI/HPC-X, UCX) plus this project, its pinned Python stack and Spark for
# preprocessing. Build and push once, then run it through pyxis/enroot:
#   docker build -t registry.example.com/dlrm:latest .
#   DLRM_CONTAINER_IMAGE=registry.example.com/dlrm:latest sbatch -N 4 --ntasks-per-node=8 \
#       --gpus-per-node=8 slurm/dlrm_multinode.sbatch --dataset_path /data/criteo_t15
# See docs/cluster.md, "Docker image". The install steps are those of scripts/bootstrap.sh for the Horovod
# stack (DLRM_STACK=horovod), from the same requirements-horovod.txt, except what the base image already provides: TensorFlow (a GPU build instead of
# tensorflow-cpu) and Horovod (already built with NCCL); tests/launch/test_dockerfile.py checks this.
ARG BASE_IMAGE=nvcr.io/nvidia/tensorflow:24.02-tf2-py3
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Java for Spark (preproc_spark3/), libgomp1 for numba's OpenMP threads (the batch reader's decode
# threads); MPI, NCCL and Horovod come with the base image. Like
# scripts/bootstrap.sh, system packages follow the base distribution's versions (not pinned).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless libgomp1 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/dlrm
# Python stack: requirements-horovod.txt without tensorflow-cpu (the image's TensorFlow is the GPU build).
COPY requirements-horovod.txt ./
RUN grep -v '^tensorflow-cpu' requirements-horovod.txt > /tmp/requirements-image.txt \
 && python -m pip install --no-cache-dir -r /tmp/requirements-image.txt \
 && rm /tmp/requirements-image.txt \
 && python -c "import horovod.tensorflow, tensorflow"

# The project itself, as scripts/bootstrap.sh installs it.
COPY . .
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e .

# Spark's PYSPARK_PYTHON and, for local masters only, SPARK_LOCAL_IP are set by
# preproc_spark3/session.py (start_session): a fixed SPARK_LOCAL_IP here would break non-local masters.
ENV PYTHONUNBUFFERED=1 \
    DLRM_ROOT=/workspace/dlrm \
    DLRM_PYTHON=python
