-- Per pod and node: the interval it held GPUs there, and how many (exactly, in policy units).
--
-- A pod holds its GPUs from status.startTime to its end (last container finishedAt, or the
-- deletion seen by the watch); a pod still running, or one that vanished between two runs, is
-- counted up to the last time it was seen ("so far"). A pod observed on a different node than
-- before (bad input: pods never move) is split into one segment per node, each from the first
-- observation on that node; nothing is dropped. Pods that never started hold nothing.
--
-- GPU units are kept as an integer over the active MIG policy's denominator (slice_units /
-- weight_denominator: a whole GPU is 7/7, a 3g MIG instance 3/7) so no rounding happens here.
--
-- Incremental (issue 25): a build recomputes, from ALL their snapshots, only the pods with a
-- snapshot collected since finops_lookback_hours (default 3, the cost fact's lookback) before the
-- hour of the newest snapshot already folded in (max last_seen). A pod is the unit of work, not
-- an hour: its interval depends on its first and last snapshot, its latest labels and its node
-- history, so a pod running across the lookback edge keeps its true start, a late snapshot
-- (collected inside the lookback, landed after newer ones) re-splits or re-ends it, and a label
-- change reaches every segment of the pod. Its rows are replaced whole (delete+insert on
-- cluster, uid). A snapshot landed later than the lookback is folded in by a restatement over the
-- hours it changes (restate_from/restate_to, `gpufabric finops restate`), or by --full-refresh.
-- Assumption: a pod's GPU requests never change (Kubernetes does not resize extended resources),
-- so a recomputed pod never loses every segment it had.
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['cluster', 'uid'],
    on_schema_change='fail',
    indexes=[
      {'columns': ['cluster', 'uid', 'segment'], 'unique': True},
      {'columns': ['last_seen']},
    ],
) }}

{%- set lookback = "interval '" ~ (var('finops_lookback_hours', 3) | int) ~ " hours'" -%}
{%- do finops_check_restate() -%}
{%- set restate_from = var('restate_from', none) -%}
{%- set restate_to = var('restate_to', none) %}

with
{% if is_incremental() %}
-- The pods touched since the last build (raw's BRIN index on collected_at, migration 0019,
-- keeps this to the newest blocks), and on a restatement also every pod with a snapshot collected in its range and every pod this
-- table has holding GPUs in it: a snapshot that landed after the lookback and changed a pod's
-- hours in the range (an end seen late) was collected after the range, so the range's own
-- snapshots would miss that pod. A restatement is rare; that second probe scans this table.
touched as (
    select distinct source as cluster, uid
    from {{ source('k8s', 'k8s_pod_snapshots') }}
    where collected_at >= {{ finops_window_start("date_trunc('hour', max(last_seen), 'UTC') - " ~ lookback) }}
    {%- if restate_from is not none %}
       or (collected_at >= '{{ restate_from }}'::timestamptz and collected_at < '{{ restate_to }}'::timestamptz)
    union
    select cluster, uid
    from {{ this }}
    where seg_start < '{{ restate_to }}'::timestamptz and seg_end > '{{ restate_from }}'::timestamptz
    {%- endif %}
),

-- Every snapshot of each touched pod, one probe of raw's (source, uid, collected_at) index per
-- pod (a lateral, so the planner cannot turn it into a scan of every snapshot).
snaps as (
    select s.*
    from touched as t
    cross join lateral (
        select * from {{ ref('stg_k8s_pod_snapshots') }} as p where p.cluster = t.cluster and p.uid = t.uid
    ) as s
),
{% else %}
snaps as (
    select * from {{ ref('stg_k8s_pod_snapshots') }}
),
{% endif %}

policy as (
    select policy, policy_version, compute_slices, weight_numerator, weight_denominator
    from {{ ref('mig_weights') }}
    where active
),

denominator as (
    select max(weight_denominator) as weight_denominator, max(policy || '/v' || policy_version) as policy_label
    from policy
),

pods as (
    select
        cluster,
        uid,
        min(start_time) as start_time,
        max(end_time) as end_time,
        max(collected_at) as last_seen
    from snaps
    group by 1, 2
),

latest as (
    select distinct on (cluster, uid)
        cluster, uid, namespace, pod, gpus, mig, root_id, parent_id, depth, client, task, agent_type, tier
    from snaps
    order by cluster, uid, collected_at desc, event_order desc
),

mig as (
    select
        l.cluster,
        l.uid,
        sum(m.count::integer * w.weight_numerator) as mig_slice_units,
        string_agg(m.profile, ',' order by m.profile) as mig_profile
    from latest as l
    cross join lateral jsonb_each_text(l.mig) as m(profile, count)
    left join policy as w on w.compute_slices = substring(m.profile from '^(\d+)g')::integer
    group by 1, 2
),

placed as (
    select
        cluster,
        uid,
        node,
        collected_at,
        event_order,
        case when node is distinct from lag(node) over w then 1 else 0 end as new_segment
    from snaps
    where node is not null
    window w as (partition by cluster, uid order by collected_at, event_order)
),

numbered as (
    select
        *,
        sum(new_segment) over (
            partition by cluster, uid order by collected_at, event_order rows unbounded preceding
        ) as segment
    from placed
),

segments as (
    select cluster, uid, segment, min(node) as node, min(collected_at) as first_on_node
    from numbered
    group by 1, 2, 3
),

bounded as (
    select
        s.cluster,
        s.uid,
        s.segment,
        s.node,
        case when s.segment = 1 then p.start_time else greatest(p.start_time, s.first_on_node) end as seg_start,
        coalesce(
            lead(s.first_on_node) over (partition by s.cluster, s.uid order by s.segment),
            coalesce(p.end_time, p.last_seen)
        ) as seg_end,
        coalesce(p.end_time, p.last_seen) as pod_end,
        p.last_seen,
        count(*) over (partition by s.cluster, s.uid) as segments
    from segments as s
    join pods as p on p.cluster = s.cluster and p.uid = s.uid
    where p.start_time is not null
)

select
    b.cluster,
    b.uid,
    l.namespace,
    l.pod,
    b.node,
    b.segment,
    b.segments,
    b.seg_start,
    least(b.seg_end, b.pod_end) as seg_end,
    b.last_seen,
    l.gpus,
    l.gpus * d.weight_denominator + coalesce(m.mig_slice_units, 0) as slice_units,
    d.weight_denominator,
    d.policy_label as mig_weight_policy,
    m.mig_profile,
    l.root_id,
    l.parent_id,
    l.depth,
    l.client,
    l.task,
    l.agent_type,
    l.tier
from bounded as b
join latest as l on l.cluster = b.cluster and l.uid = b.uid
left join mig as m on m.cluster = b.cluster and m.uid = b.uid
cross join denominator as d
