"""The broker's request processors: one module per group of RocketMQ request codes, each given the
collaborators it uses at construction (never the whole broker); ``send_runs`` sorts a send's batch
into the runs its features store (half, delay level, timer, normal)."""
