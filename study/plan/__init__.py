"""What a study's Tuner runs: the searcher, the trials planned from the spec and the record, the checks before a launch, time slices."""
