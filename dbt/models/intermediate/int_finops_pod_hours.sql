-- Per pod, node and UTC hour: the seconds (exact, microseconds kept) the pod held GPUs there.
-- Pods holding no GPU are left out; they cost nothing and would only add zero lines.
with intervals as (
    select * from {{ ref('int_finops_pod_intervals') }}
    where seg_end > seg_start and slice_units > 0
),

split as (
    select
        i.*,
        h.hour,
        extract(epoch from least(i.seg_end, h.hour + interval '1 hour') - greatest(i.seg_start, h.hour)) as seconds
    from intervals as i
    cross join lateral generate_series(
        date_trunc('hour', i.seg_start, 'UTC'), i.seg_end - interval '1 microsecond', interval '1 hour'
    ) as h(hour)
)

select
    cluster,
    uid,
    hour,
    node,
    max(namespace) as namespace,
    max(pod) as pod,
    max(slice_units) as slice_units,
    max(weight_denominator) as weight_denominator,
    max(mig_weight_policy) as mig_weight_policy,
    max(mig_profile) as mig_profile,
    sum(seconds) as seconds,
    max(root_id) as root_id,
    max(parent_id) as parent_id,
    max(depth) as depth,
    max(client) as client,
    max(task) as task,
    max(agent_type) as agent_type,
    max(tier) as tier
from split
group by cluster, uid, hour, node
