"""The live view of a running job: the file follower and the TUI."""
