"""rollwise's planners inside other trainers. Each module needs its trainer installed, so nothing is
imported here: `from rollwise.integrations.trl import RollwiseGRPOTrainer` (TRL), and verl's trainer
loads `rollwise.integrations.verl.RollwiseReplayBuffer` from its config. `host.PlannerHost` is the
trainer-agnostic part, for wiring a planner into another trainer."""
