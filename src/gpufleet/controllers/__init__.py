"""Controllers for TrainingJob, InferenceService, GPUPool and node health, against the Store protocol."""
