"""Extensions: components beside the pipeline. `health_check` answers liveness probes."""
