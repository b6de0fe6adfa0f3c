"""MIG partitioning (issue 21): profiles and placement rules as data, layout validity, tenant
demand and isolation, the planner, its exact yardstick, and mig-parted configs. Pure: no I/O;
the loaders take text."""
