"""What the run is: config files, the log's facts, the model, scripts, the environment."""
