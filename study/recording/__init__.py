"""The study's record as the driver keeps it: study.json, run folders, status, the Tune callbacks that record."""
