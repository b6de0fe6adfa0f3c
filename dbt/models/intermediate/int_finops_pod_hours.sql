-- Per pod, node and UTC hour: the seconds (exact, microseconds kept) the pod held GPUs there.
-- Pods holding no GPU are left out; they cost nothing and would only add zero lines.
--
-- Incremental (issue 25), per pod like int_finops_pod_intervals: a build re-splits into hours
-- every pod whose intervals were recomputed since this table last saw them (last_seen from
-- finops_lookback_hours before the hour of its own newest last_seen; on a restatement, also every
-- pod seen since restate_from that started before restate_to), all its hours, and replaces the
-- pod's rows whole. Its own watermark, not the intervals', so a build of the intervals without
-- this model in between is still folded in. The cost fact reads it by hour (index on hour); the
-- unique index is the line key's check.
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['cluster', 'uid'],
    on_schema_change='fail',
    indexes=[
      {'columns': ['cluster', 'uid', 'hour', 'node'], 'unique': True},
      {'columns': ['hour']},
      {'columns': ['last_seen']},
    ],
) }}

{%- set lookback = "interval '" ~ (var('finops_lookback_hours', 3) | int) ~ " hours'" -%}
{%- do finops_check_restate() -%}
{%- set restate_from = var('restate_from', none) -%}
{%- set restate_to = var('restate_to', none) %}

with intervals as (
    select * from {{ ref('int_finops_pod_intervals') }}
    where seg_end > seg_start and slice_units > 0
    {%- if is_incremental() %}
      and (last_seen >= {{ finops_window_start("date_trunc('hour', max(last_seen), 'UTC') - " ~ lookback) }}
      {%- if restate_from is not none %}
           -- whole pods, every segment (their rows are replaced whole): a superset of those the
           -- intervals' restatement recomputed that hold GPUs in the range now or did before
           -- (a pod's last_seen only grows and its start only moves earlier)
           or (cluster, uid) in (
               select cluster, uid from {{ ref('int_finops_pod_intervals') }}
               where last_seen >= '{{ restate_from }}'::timestamptz and seg_start < '{{ restate_to }}'::timestamptz
           )
      {%- endif %})
    {%- endif %}
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
    max(tier) as tier,
    max(last_seen) as last_seen
from split
group by cluster, uid, hour, node
