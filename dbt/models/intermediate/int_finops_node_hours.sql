-- Per node and UTC hour: GPU capacity (one GPU-hour per GPU), the node's owner and its MIG layout.
-- A node counts from the hour of its first snapshot to the hour of its last, plus any hour a pod
-- held GPUs on it, so capacity can never be missing under an allocation. Model and count come
-- from the node's latest snapshot.
--
-- The layout and owner of an hour are those of the node's last snapshot taken before the hour
-- ends (its first snapshot for hours before it was first seen): a layout changed within the hour
-- counts from the hour it was first seen in. stranded_slice_units are the compute slices of the
-- node's MIG-enabled GPUs that no instance covers, in units of the active MIG weight policy
-- (mig_weights; compute-slices-over-7: a GPU is 7): 7 x MIG GPUs - sum(instances x weight).
-- MIG GPUs = the snapshot's GPU count - its whole GPUs (`nvidia.com/gpu` under the mixed
-- strategy). NULL when the node advertises no MIG resource or its layout is unreadable or
-- inconsistent (mig_layout_issue says which).
with nodes as (
    select * from {{ ref('stg_k8s_node_snapshots') }}
),

policy as (
    select compute_slices, weight_numerator, weight_denominator, policy || '/v' || policy_version as label
    from {{ ref('mig_weights') }}
    where active
),

denominator as (
    select max(weight_denominator) as weight_denominator, max(label) as policy_label from policy
),

latest as (
    select distinct on (cluster, node) cluster, node, gpu_model, gpu_count
    from nodes
    order by cluster, node, collected_at desc
),

observed as (
    select
        cluster,
        node,
        date_trunc('hour', min(collected_at), 'UTC') as first_hour,
        date_trunc('hour', max(collected_at), 'UTC') as last_hour
    from nodes
    group by 1, 2
),

node_hours as (
    select o.cluster, o.node, h.hour
    from observed as o
    cross join lateral generate_series(o.first_hour, o.last_hour, interval '1 hour') as h(hour)
    union
    select cluster, node, hour from {{ ref('int_finops_pod_hours') }}
),

-- One pass of laterals per node-hour, no CTE read twice: the cost fact's hour window then reaches
-- node_hours, and each hour's snapshot is one index probe on (source, node, collected_at) -- the
-- laterals read the staging view itself, not the `nodes` CTE (read twice, so materialised and
-- scanned whole for every node-hour).
in_force as (
    select
        nh.cluster,
        nh.node,
        nh.hour,
        l.gpu_model,
        coalesce(l.gpu_count, 0) as gpu_count,
        coalesce(before.owner, first.owner) as owner,
        coalesce(before.gpu_count, first.gpu_count) - coalesce(before.mig_whole_gpus, first.mig_whole_gpus)
            as mig_gpus,
        case when before.collected_at is not null then before.mig_layout_issue else first.mig_layout_issue end
            as snapshot_issue,
        m.covered_units,
        m.unweighted_profiles,
        m.mig_layout
    from node_hours as nh
    left join latest as l on l.cluster = nh.cluster and l.node = nh.node
    left join lateral (
        select s.collected_at, s.gpu_count, s.owner, s.mig_instances, s.mig_whole_gpus, s.mig_layout_issue
        from {{ ref('stg_k8s_node_snapshots') }} as s
        where s.cluster = nh.cluster and s.node = nh.node and s.collected_at < nh.hour + interval '1 hour'
        order by s.collected_at desc
        limit 1
    ) as before on true
    left join lateral (
        select s.collected_at, s.gpu_count, s.owner, s.mig_instances, s.mig_whole_gpus, s.mig_layout_issue
        from {{ ref('stg_k8s_node_snapshots') }} as s
        where before.collected_at is null and s.cluster = nh.cluster and s.node = nh.node
        order by s.collected_at
        limit 1
    ) as first on true
    left join lateral (
        select
            sum(e.value::integer * w.weight_numerator) as covered_units,
            count(*) filter (where w.compute_slices is null) as unweighted_profiles,
            string_agg(e.profile || ' x' || e.value, ', ' order by e.profile) as mig_layout
        from jsonb_each_text(coalesce(before.mig_instances, first.mig_instances)) as e(profile, value)
        left join policy as w on w.compute_slices = substring(e.profile from '^(\d+)g')::integer
        having count(*) > 0
    ) as m on true
)

select
    f.cluster,
    f.node,
    f.hour,
    f.gpu_model,
    f.gpu_count,
    f.owner,
    f.mig_layout,
    case when f.mig_gpus >= 0 and f.unweighted_profiles = 0 and f.covered_units <= f.mig_gpus * d.weight_denominator
        then f.mig_gpus * d.weight_denominator - f.covered_units
    end as stranded_slice_units,
    d.weight_denominator,
    d.policy_label as mig_weight_policy,
    case
        when f.snapshot_issue is not null then f.snapshot_issue
        when f.mig_layout is null then null
        when f.mig_gpus < 0 then 'more whole GPUs (nvidia.com/gpu) than GPUs on the node'
        when f.unweighted_profiles > 0 then 'a MIG profile the active weight policy does not weigh'
        when f.covered_units > f.mig_gpus * d.weight_denominator
            then 'MIG instances cover more compute slices than the node''s MIG GPUs have'
    end as mig_layout_issue
from in_force as f
cross join denominator as d
