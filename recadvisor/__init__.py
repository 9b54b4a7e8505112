"""recadvisor: a performance advisor for TensorFlow recommender training."""

__version__ = "0.1.0"
