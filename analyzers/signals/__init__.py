"""Facts several detectors share, each computed once from the event table or the sampler data."""
