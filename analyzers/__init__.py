"""Trace analysis: TensorBoard logdirs -> event table -> findings. Never imports TensorFlow."""
