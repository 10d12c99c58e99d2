"""The driver process: its plumbing (lock, Ray, signals), launch/resume/widen, export/import, Ray's private names."""
