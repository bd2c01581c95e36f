"""``vlrollout run``: the recipe that runs a workflow over a data file and writes trajectories,
a summary and a report (config, data loading, runner, report)."""
