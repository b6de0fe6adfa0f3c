-- Pod observations as collected, with the attribution dimensions already defaulted to
-- 'unattributed' by the collector (core/finops/labels.py). One row per pod per observation.
select
    source as cluster,
    run_id,
    collected_at,
    event,
    -- a DELETED event sorts after a list or MODIFIED seen at the same instant
    case event when 'DELETED' then 2 when 'list' then 0 else 1 end as event_order,
    uid,
    namespace,
    name as pod,
    node,
    phase,
    start_time,
    end_time,
    gpus,
    mig,
    unknown_gpu_resources,
    root_id,
    parent_id,
    depth,
    client,
    task,
    agent_type,
    tier,
    issues
from {{ source('k8s', 'k8s_pod_snapshots') }}
