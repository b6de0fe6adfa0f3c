-- Per node and UTC hour: GPU capacity (one GPU-hour per GPU). A node counts from the hour of its
-- first snapshot to the hour of its last, plus any hour a pod held GPUs on it, so capacity can
-- never be missing under an allocation. Model and count come from the node's latest snapshot.
with nodes as (
    select * from {{ ref('stg_k8s_node_snapshots') }}
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
)

select
    nh.cluster,
    nh.node,
    nh.hour,
    l.gpu_model,
    coalesce(l.gpu_count, 0) as gpu_count
from node_hours as nh
left join latest as l on l.cluster = nh.cluster and l.node = nh.node
