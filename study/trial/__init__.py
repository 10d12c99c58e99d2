"""What one Tune trial trains and runs: its descriptor, its checkpoints, the trainable."""
