-- Telemetry pod-hours with no pod-hour holding GPUs (clock skew between DCGM and pod times, pods
-- we never saw, or pods on CPUs only). Counted by the finops checks asset, never charged.
select a.hour, a.namespace, a.pod, a.measured
from {{ ref('int_finops_pod_activity') }} as a
where not exists (
    select 1 from {{ ref('int_finops_pod_hours') }} as p
    where p.namespace = a.namespace and p.pod = a.pod and p.hour = a.hour
)
