"""Distributed DLRM trainer for Slurm clusters (TensorFlow 2 + Horovod)."""
