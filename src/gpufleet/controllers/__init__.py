"""Controllers for TrainingJob, InferenceService, GPUPool and node health, written against the Store protocol."""
