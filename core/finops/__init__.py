"""FinOps logic on pod snapshots: attribution, GPU requests and MIG weights, cost math, agent
trees, anomaly baselines. Pure: no I/O, no Dagster; the assets and dbt models build on it."""
