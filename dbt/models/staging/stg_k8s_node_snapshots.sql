-- Node observations: the GPU model and GPU count that make up capacity.
select
    source as cluster,
    run_id,
    collected_at,
    node,
    gpu_model,
    gpu_count,
    mig_capable
from {{ source('k8s', 'k8s_node_snapshots') }}
